"""Ctrl-C during a streamed answer (`zest chat`, `zest run`): the signal handler itself shuts
the stream's socket, so the gateway sees its client leave and stops generating even when
Python loses the KeyboardInterrupt.

Python runs a signal's handler at the next safe point of the main thread, and that point may
be inside a finalizer (a `__del__`, a generator the garbage collector closes): an exception
raised there is printed as "Exception ignored in ..." and dropped. Raising alone, Ctrl-C then
did nothing: the answer went on being read, and the gateway went on generating for a client
that had asked it to stop. A shut socket ends the read whatever happens to the exception, and
`stopped` tells the reader that this end is a stop, not a broken answer.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

import httpx

__all__ = ["StopOnCtrlC"]


@dataclass
class StopOnCtrlC:
    stopped: bool = False  # Ctrl-C came while the answer was read
    _socket: socket.socket | None = None

    def watch(self, response: httpx.Response) -> None:
        """The answer under way: its connection is the one Ctrl-C shuts."""
        stream = response.extensions.get("network_stream")
        found = stream.get_extra_info("socket") if stream is not None else None
        self._socket = found if isinstance(found, socket.socket) else None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Around the reading of one answer; Python's own handler before and after."""
        self.stopped = False
        try:
            previous = signal.signal(signal.SIGINT, self._interrupted)
        except ValueError:  # not the main thread: only it may handle signals
            previous = None
        try:
            yield
        finally:
            self._socket = None
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True
        if self._socket is not None:
            with contextlib.suppress(OSError):  # already closed: nothing to stop
                self._socket.shutdown(socket.SHUT_RDWR)
        raise KeyboardInterrupt
