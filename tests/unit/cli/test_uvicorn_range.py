"""zest serve's graceful shutdown overrides two uvicorn.Server internals (startup and
handle_exit): pyproject.toml pins uvicorn to the range that was written for, and the installed
uvicorn must be in it and still have both methods in the shapes GracefulServer overrides."""

from __future__ import annotations

import ast
import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

import uvicorn
import uvicorn.server
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from zest.gateway.cli._serve import UVICORN_RANGE, GracefulServer

ROOT = Path(__file__).resolve().parents[3]


def _required() -> SpecifierSet:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [uvicorn_req] = [
        req for req in map(Requirement, project["dependencies"]) if req.name == "uvicorn"
    ]
    return uvicorn_req.specifier


def test_pyproject_pins_uvicorn_to_the_range_the_overrides_were_written_for() -> None:
    assert _required() == SpecifierSet(UVICORN_RANGE)
    assert any(spec.operator == "<" for spec in _required())  # an upper bound: a pin


def test_the_installed_uvicorn_is_in_that_range() -> None:
    assert version("uvicorn") in SpecifierSet(UVICORN_RANGE)


def _uvicorn_parameters(method: str) -> list[str]:
    """The parameters of uvicorn.Server's method as uvicorn's source writes them: read from the
    file, since other libraries patch the class in place (sse_starlette, imported by client
    libraries the suite tests, swaps Server.handle_exit for a (*args, **kwargs) wrapper)."""
    tree = ast.parse(Path(inspect.getfile(uvicorn.server)).read_text())
    [server] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Server"]
    [found] = [
        n
        for n in server.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == method
    ]
    return [arg.arg for arg in found.args.args]


def test_the_overridden_methods_keep_their_shapes() -> None:
    for name in ("startup", "handle_exit"):
        ours = inspect.signature(getattr(GracefulServer, name))
        assert _uvicorn_parameters(name) == list(ours.parameters), name
    # handle_exit is what uvicorn installs as the signal handler: the override is reached
    # only while capture_signals still installs it by that name.
    assert "self.handle_exit" in inspect.getsource(uvicorn.Server.capture_signals)
    # The flags handle_exit sets to stop the serve loop.
    setup = inspect.getsource(uvicorn.Server.__init__)
    assert "self.should_exit" in setup
    assert "self.force_exit" in setup
