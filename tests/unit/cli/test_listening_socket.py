"""The listening socket `zest serve` binds: each connection it accepts sends small writes at once.

asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets whose proto says TCP. With
the listener made as socket(AF_INET, SOCK_STREAM), proto 0, a streamed token written while the
response's headers were still unacknowledged waited for the client's delayed ACK (~40 ms on
Linux), and the first tokens reached the client late and several at once (issue 25).
"""

from __future__ import annotations

import asyncio
import socket

from zest.gateway.cli._serve import _bind


def test_an_accepted_connection_has_nagle_off() -> None:
    listening = _bind("127.0.0.1", 0)
    port = listening.getsockname()[1]

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listening)  # as uvicorn serves it
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
            return nodelay

    assert asyncio.run(accept_one()) != 0
