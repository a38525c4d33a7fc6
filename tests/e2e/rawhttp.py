"""HTTP/1.1 over a bare socket: requests no client library would send (a path with `..` left
in, two Authorization headers, a content-length that lies), and the raw answer."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    """What came back: status 0 when the server closed the connection without an answer."""

    status: int
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").partition(";")[0].strip()


def build(
    method: bytes,
    target: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes | None = None,
    *,
    length: bool = True,
    host: bytes | None = b"127.0.0.1",
) -> bytes:
    """A request as bytes; `length` adds the body's true content-length; `host` is the Host
    header's value (None: no Host header)."""
    lines = [method + b" " + target + b" HTTP/1.1"]
    if host is not None:
        lines.append(b"host: " + host)
    lines.append(b"connection: close")
    lines += [name + b": " + value for name, value in headers]
    if length and body is not None:
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def send(port: int, raw: bytes, timeout: float = 60.0) -> Reply:
    """Send `raw` to 127.0.0.1:`port` and read the answer to the end (the server closes)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionError:  # refused mid-request: what came before still counts
            pass
    return parse(received)


def parse(received: bytes) -> Reply:
    head, _, rest = received.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100"):  # an interim answer to Expect: 100-continue
        head, _, rest = rest.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"HTTP/1.1 "):
        return Reply(0, {}, received)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = _unchunked(rest) if headers.get("transfer-encoding") == "chunked" else rest
    return Reply(int(lines[0].split()[1]), headers, body)


def _unchunked(data: bytes) -> bytes:
    body = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body += data[:size]
        data = data[size + 2 :]
    return body
