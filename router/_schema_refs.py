"""A schema placed inside another keeps its local references.

A tool's parameters become one branch of zest's tool-call envelope (gateway/serving/_tools.py);
a `$ref` such as `#/$defs/item` inside them names a place in the parameters, which is no longer
the root: resolved against the envelope it points nowhere (the grammar check answered 400 for a
schema inside the limits). `relocated` rewrites each local reference to the place the schema
now sits at. Pure.
"""

from __future__ import annotations

from typing import Any

__all__ = ["relocated"]


def relocated(schema: Any, at: str) -> Any:
    """`schema` (a copy) for placing at JSON Pointer `at` (`/properties/arguments`) inside
    another: every `$ref` to `#/...` becomes `#{at}/...`; `#` alone becomes `#{at}`."""
    if isinstance(schema, list):
        return [relocated(item, at) for item in schema]
    if not isinstance(schema, dict):
        return schema
    moved = {key: relocated(value, at) for key, value in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        moved["$ref"] = f"#{at}{ref[1:]}"
    return moved
