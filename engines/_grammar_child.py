"""The grammar checker's child process: JSON Schema in, checked GBNF grammar out.

Run as a script by engines/_grammar_check.py (standard library and llama_cpp only, so it starts
fast; the converter is engines/_grammar_convert.py, loaded by its path). Each line on stdin is
`{"schema": "<JSON text>"}`; each answer, one line on stdout, is `{"grammar": ...}` or
`{"error": kind, "detail": ...}`. The converter runs under an address-space
limit (a MemoryError is an answer, not a crash), and llama.cpp parses the grammar on a thread
whose stack is far smaller than any serving thread's: a grammar that parses here parses there
with room to spare, and one that would overflow a stack kills only this process.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
from typing import Any

# The converter's string character admits control characters, which JSON forbids raw in
# strings (json.loads refuses a newline inside one): exclude them as llama.cpp's json.gbnf.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'
_CONVERTER_ERRORS = (AssertionError, ValueError, KeyError, TypeError, RecursionError)


def _vm_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _converter() -> Any:
    """engines/_grammar_convert.py, loaded by its path: this script runs outside the zest
    package (importing it would import the engines), and that module needs only llama_cpp."""
    import importlib.util
    from pathlib import Path

    name = "zest_grammar_convert"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("_grammar_convert.py")
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _convert(schema: str) -> str:
    return str(_converter().schema_to_grammar(schema)).replace(_LOOSE_CHAR, _JSON_CHAR)


def _parses(grammar: str, stack_bytes: int) -> bool:
    """Whether llama.cpp builds a grammar sampler of it, parsed on a small-stack thread."""
    import llama_cpp

    result: list[bool] = []

    def parse() -> None:
        sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode("utf-8"), b"root")
        result.append(bool(sampler))
        if sampler:
            llama_cpp.llama_sampler_free(sampler)

    threading.stack_size(stack_bytes)
    thread = threading.Thread(target=parse, name="grammar-parse")
    thread.start()
    thread.join()
    return bool(result and result[0])


def check(schema: str, max_bytes: int, stack_bytes: int) -> dict[str, Any]:
    try:
        grammar = _convert(schema)
    except _CONVERTER_ERRORS as exc:
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return {"error": type(exc).__name__, "detail": str(detail)[:500]}
    size = len(grammar.encode("utf-8"))
    if size > max_bytes:
        return {"error": "size", "detail": str(size)}
    if not _parses(grammar, stack_bytes):
        return {"error": "parse"}
    return {"grammar": grammar}


def answer_line(schema: str, max_bytes: int, stack_bytes: int) -> str:
    """check's reply as a JSON line, or "memory" wherever the limit is met: a grammar the
    converter built just under it can still fail the copies after (its UTF-8 encoding, the
    reply's JSON), and which step meets the limit varies from run to run with the heap."""
    try:
        return json.dumps(check(schema, max_bytes, stack_bytes))
    except MemoryError:
        return json.dumps({"error": "memory"})


def main() -> None:
    memory, max_bytes, stack_bytes = (int(arg) for arg in sys.argv[1:4])
    import llama_cpp  # noqa: F401  (loaded before the limit: its libraries are mapped once)

    _converter()

    limit = _vm_bytes() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(answer_line(json.loads(line)["schema"], max_bytes, stack_bytes), flush=True)


if __name__ == "__main__":
    main()
