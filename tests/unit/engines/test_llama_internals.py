"""llama_cpp._internals is private to llama-cpp-python: it changes without notice. zest touches
it in one module (engines/_llama_native.py), and what it uses there is listed in INTERNALS_USED;
this checks that list against the installed version, so an upgrade that renames a class, drops
an attribute or reshapes a call fails here, by name, instead of deep inside a generation."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from zest.engines._llama_native import INTERNALS_USED, load_internals

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = ("engines", "gateway", "router", "policies", "bench")  # bench: zest bench's ceiling
IMPORTS_INTERNALS = re.compile(r"llama_cpp\s+import\s+_internals|llama_cpp\._internals\b")
USES = [(cls, name, used) for cls, names in INTERNALS_USED.items() for name, used in names.items()]


def _assigned_in_init(cls: type) -> set[str]:
    """The instance attributes `cls.__init__` sets (self.<name> = ...)."""
    return set(re.findall(r"self\.(\w+)\s*[:=]", inspect.getsource(cls.__init__)))


@pytest.mark.parametrize(("cls_name", "name", "used"), USES, ids=[f"{c}.{n}" for c, n, _ in USES])
def test_what_zest_uses_of_llama_cpp_internals_is_there(
    cls_name: str, name: str, used: tuple[str, ...]
) -> None:
    internals = load_internals()
    cls = getattr(internals, cls_name, None)
    assert isinstance(cls, type), f"llama_cpp._internals.{cls_name} is gone"
    member = getattr(cls, name, None)
    if member is None:  # an attribute its constructor sets, never called
        assert not used
        assert name in _assigned_in_init(cls), f"{cls_name}().{name} is no longer set"
        return
    parameters = [p for p in inspect.signature(member).parameters if p != "self"]
    assert tuple(parameters[: len(used)]) == used, (
        f"llama_cpp._internals.{cls_name}.{name} now takes {parameters}, zest passes {used}"
    )


def test_the_sampler_chain_zest_builds_is_made_of_what_it_checks() -> None:
    """Every add_* the chain calls is in the table (the table is not a guess)."""
    source = (ROOT / "engines" / "_llama_native.py").read_text()
    called = set(re.findall(r"sampler\.(add_\w+)\(", source))
    assert called
    assert called <= set(INTERNALS_USED["LlamaSampler"])


def test_only_engines_llama_native_imports_llama_cpp_internals() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if IMPORTS_INTERNALS.search(path.read_text(encoding="utf-8"))
    )
    assert importers == ["engines/_llama_native.py"]
