"""`zest.bench`: the harness behind `zest bench`, out of the serving path.

It starts zest, llama.cpp's llama-server and llama_cpp.server on loopback, runs raw
llama-cpp-python and the hardware ceiling in process, and measures zest's own phases
(`_run.py` drives them; `_compare.py`, `_mixed.py`, `_phases.py`, `_routing.py` measure;
`_report.py` writes bench.json and bench.png). `_spawn.py` starts a server as a child process,
for the bench and the tests. The scripts beside it (soak.py, affinity.py, engines.py, ...) are
run as files: `python bench/soak.py`.

Serving code never imports this package; `zest bench` (gateway/cli/_bench_command.py) imports
it when the command runs (tests/unit/test_layering.py).
"""

from zest.bench._run import DEFAULT_PHASES, PHASES, BenchOptions, format_report, run_bench

__all__ = ["DEFAULT_PHASES", "PHASES", "BenchOptions", "format_report", "run_bench"]
