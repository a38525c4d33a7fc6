"""The access log never holds a credential: values of key-like query parameters (`?api_key=`,
`token=`, ...) are replaced before uvicorn's access line is written."""

from __future__ import annotations

import logging
import re

__all__ = ["RedactCredentials", "redact_query"]

# A parameter named like a credential: key, api_key, x-api-key, token, access_token, secret, ...
_SECRET_PARAM = re.compile(
    r"(?P<name>(?<![^&])(?:[\w.-]*[_.-])?(?:api_?key|key|token|secret|password|auth|"
    r"authorization))=(?P<value>[^&]*)",
    re.I,
)


def redact_query(target: str) -> str:
    """`path?api_key=sk-1&n=2` -> `path?api_key=[redacted]&n=2`."""
    path, sep, query = target.partition("?")
    if not sep:
        return target
    return path + "?" + _SECRET_PARAM.sub(lambda m: f"{m['name']}=[redacted]", query)


class RedactCredentials(logging.Filter):
    """On uvicorn.access: its args are (client, method, path with query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True
