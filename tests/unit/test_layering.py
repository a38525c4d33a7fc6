"""The import rules of docs/architecture.md, checked over the source with `ast`.

Units are the packages and subpackages (zest.router, zest.policies, zest.engines,
zest.gateway.http, zest.gateway.serving, zest.gateway.cli, zest.gateway) and the leaf modules
zest.errors and zest.affinity. Every import counts, lazy ones inside functions and
TYPE_CHECKING ones included: a deferred import is still a dependency.

- router/ and policies/ are pure: they never import zest.engines or zest.gateway;
- zest.errors and zest.affinity are leaves: they import nothing of zest (clients of a fleet
  may copy zest/affinity.py alone);
- a private module (a name with a leading underscore) is imported only from inside the
  package that holds it; another unit goes through that package's `__init__`;
- the units' import graph has no cycle, and neither has the graph of a package's own modules
  (an import inside a function breaks a cycle at run time, and leaves it there);
- zest.bench (bench/, the harness of `zest bench`) is out of the serving path: nothing imports
  it but itself and the `zest bench` command, which imports it only when it runs;
- nothing, the tests included, imports a folder by its own name (`bench`, `engines`): only as
  the zest.* package pyproject.toml's package-dir makes it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# zest.engines is engines/, ...: the folders pyproject.toml's package-dir maps, zest/ the root.
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIRS = {name: ROOT / folder for name, folder in SETUPTOOLS["package-dir"].items()}
PURE = ("zest.router", "zest.policies")
LEAVES = ("zest.errors", "zest.affinity")
FORBIDDEN_TO_PURE = ("zest.engines", "zest.gateway")
BENCH = "zest.bench"
BENCH_COMMAND = "zest.gateway.cli._bench_command"  # `zest bench`: its one way in


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # module name (a package's __init__ is the package's name)
    line: int

    def where(self) -> str:
        return f"{self.importer}:{self.line} imports {self.target}"


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _sources() -> dict[str, Path]:
    """Every source module by the name it is installed as (engines/_pool.py: zest.engines._pool)."""
    return {
        _module_name(package, folder, path): path
        for package, folder in PACKAGE_DIRS.items()
        for path in sorted(folder.rglob("*.py"))
    }


def _is_package(module: str) -> bool:
    return _sources()[module].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if _is_package(importer) else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(importer: str, node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(importer, node)
        for alias in node.names:
            # `from zest.engines import _pool` imports the module zest.engines._pool.
            sub = f"{base}.{alias.name}"
            yield sub if sub in _sources() else base


@cache
def imports() -> tuple[Import, ...]:
    found = []
    for module, path in _sources().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(module, node):
                if target == "zest" or target.startswith("zest."):
                    found.append(Import(module, target, getattr(node, "lineno", 0)))
    return tuple(found)


def unit(module: str) -> str:
    """The package (or subpackage) a module belongs to; the leaf modules stand alone."""
    if module in LEAVES or (module in _sources() and _is_package(module)):
        return module
    return module.rpartition(".")[0]


def private_owner(target: str) -> str | None:
    """The package holding the first private module on the target's path, if any."""
    parts = target.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def test_the_sources_are_found() -> None:
    units = {unit(m) for m in _sources()}
    assert {
        "zest",
        "zest.errors",
        "zest.affinity",
        "zest.router",
        "zest.policies",
        "zest.engines",
        "zest.gateway",
        "zest.gateway.http",
        "zest.gateway.serving",
        "zest.gateway.cli",
        "zest.bench",
    } <= units
    assert len(imports()) > 50


def test_router_and_policies_import_neither_engines_nor_gateway() -> None:
    bad = [
        i.where()
        for i in imports()
        if i.importer.startswith(PURE)
        and any(i.target == f or i.target.startswith(f + ".") for f in FORBIDDEN_TO_PURE)
    ]
    assert bad == []


@pytest.mark.parametrize("leaf", LEAVES)
def test_the_leaf_modules_import_nothing_of_zest(leaf: str) -> None:
    assert [i.where() for i in imports() if i.importer == leaf] == []


def test_no_module_imports_a_private_module_of_another_package() -> None:
    bad = []
    for found in imports():
        owner = private_owner(found.target)
        # Inside the owner, a private subpackage's modules count too (zest.bench._soak).
        inside = unit(found.importer) == owner or private_owner(found.importer) == owner
        if owner is not None and not inside:
            bad.append(found.where())
    assert bad == []


def _is_bench(module: str) -> bool:
    return module == BENCH or module.startswith(BENCH + ".")


def test_nothing_but_the_bench_command_imports_the_bench() -> None:
    bad = [
        i.where()
        for i in imports()
        if _is_bench(i.target) and not _is_bench(i.importer) and i.importer != BENCH_COMMAND
    ]
    assert bad == []


def test_the_bench_command_imports_the_bench_only_when_it_runs() -> None:
    """A module-level import would load the harness (and the engines) with every command."""
    tree = ast.parse(_sources()[BENCH_COMMAND].read_text(encoding="utf-8"))
    eager = [
        target
        for node in tree.body
        for target in _targets(BENCH_COMMAND, node)
        if _is_bench(target)
    ]
    lazy = [target for node in ast.walk(tree) for target in _targets(BENCH_COMMAND, node)]
    assert eager == []
    assert BENCH in lazy


def _bare_imports(path: Path) -> Iterator[str]:
    """Imports of a mapped folder by its own name (`bench._fleet` for zest.bench._fleet)."""
    bare = {folder.name for package, folder in PACKAGE_DIRS.items() if package != "zest"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        yield from (f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                    for name in names if name.partition(".")[0] in bare)  # fmt: skip


def test_nothing_imports_a_folder_by_its_own_name() -> None:
    """Where the repository's root is on sys.path (pytest puts it there) engines/ is also the
    package `engines`: importing it by that name would load each of its modules a second time."""
    files = [*_sources().values(), *sorted((ROOT / "tests").rglob("*.py"))]
    assert [found for path in files for found in _bare_imports(path)] == []


def _unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for found in imports():
        source, target = unit(found.importer), unit(found.target)
        if source != target:
            graph.setdefault(source, set()).add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path of units, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_packages_import_each_other_without_a_cycle() -> None:
    cycle = _cycle(_unit_graph())
    assert cycle is None, " -> ".join(cycle or [])


def _module_graph() -> dict[str, set[str]]:
    """Each module's imports of the other modules of its own unit (a package's `__init__` is
    the package's node: a module importing its own package's front depends on all of it)."""
    graph: dict[str, set[str]] = {}
    for found in imports():
        source, target = found.importer, found.target
        if source != target and target in _sources() and unit(source) == unit(target):
            graph.setdefault(source, set()).add(target)
    return graph


def test_the_modules_of_a_package_import_each_other_without_a_cycle() -> None:
    """The serving layer's _runtime -> _routing -> _generation -> _runtime was one, hidden
    from the package-level graph and broken at run time by imports inside functions."""
    cycle = _cycle(_module_graph())
    assert cycle is None, " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": {"c"}}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
    ],
)
def test_the_cycle_finder(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert _cycle(graph) == cycle


def test_private_owner_and_unit() -> None:
    assert private_owner("zest.engines._pool") == "zest.engines"
    assert private_owner("zest.gateway.serving._runtime") == "zest.gateway.serving"
    assert private_owner("zest.gateway.serving") is None
    assert private_owner("zest.__main__") is None
    assert unit("zest.gateway.http._app") == "zest.gateway.http"
    assert unit("zest.gateway.http") == "zest.gateway.http"
    assert unit("zest.errors") == "zest.errors"
    assert unit("zest.affinity") == "zest.affinity"
