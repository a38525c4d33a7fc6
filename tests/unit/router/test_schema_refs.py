"""A schema placed inside another keeps its local references (router/_schema_refs.py)."""

from __future__ import annotations

from zest.router import relocated


def test_local_references_follow_the_schema_to_its_new_place() -> None:
    schema = {
        "type": "object",
        "properties": {
            "item": {"$ref": "#/$defs/item"},
            "list": {"type": "array", "items": {"$ref": "#/properties/item"}},
            "self": {"$ref": "#"},
            "remote": {"$ref": "https://example.org/schema"},
        },
        "$defs": {"item": {"type": "string"}},
    }
    moved = relocated(schema, "/properties/arguments")
    assert moved["properties"]["item"] == {"$ref": "#/properties/arguments/$defs/item"}
    assert moved["properties"]["list"]["items"] == {
        "$ref": "#/properties/arguments/properties/item"
    }
    assert moved["properties"]["self"] == {"$ref": "#/properties/arguments"}
    assert moved["properties"]["remote"] == {"$ref": "https://example.org/schema"}
    assert schema["properties"]["item"] == {"$ref": "#/$defs/item"}  # a copy
