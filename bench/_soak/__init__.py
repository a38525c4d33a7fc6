"""The parts of bench/soak.py, the soak and fault harness (docs/reliability.md).

- outcomes: what one request did, and whether that is what zest documents (pure);
- tally: per-minute figures, the summary and the verdict (pure);
- proxy: the fault-injecting loopback proxy in front of the real upstream;
- clients: the request streams (the official openai client and raw httpx);
- chaos: the schedules that run beside them (faults, reloads, RSS samples);
- servers: the routes file and the processes (zest serve, llama_cpp.server).
"""
