"""The zest namespace as pyproject.toml declares it: package-dir maps the top-level folders
under zest, and `packages` lists every package in them (setuptools builds a wheel from that list
alone, so a subpackage missing there would be missing from the wheel). tests/e2e/test_packaging.py
builds the wheel and imports from it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def packages_on_disk() -> list[str]:
    """Every folder with an __init__.py under a mapped folder, by its zest.* name."""
    found = []
    for package, folder in SETUPTOOLS["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            found.append(".".join((package, *init.parent.relative_to(REPO / folder).parts)))
    return sorted(found)


def test_every_package_of_the_mapped_folders_is_listed() -> None:
    assert sorted(SETUPTOOLS["packages"]) == packages_on_disk()


def test_the_namespace_is_mapped_not_linked() -> None:
    """Links break on Windows and made each module importable under two paths."""
    folders = [REPO / folder for folder in SETUPTOOLS["package-dir"].values()]
    links = [p for folder in folders for p in [folder, *folder.rglob("*")] if p.is_symlink()]
    assert links == []
    assert SETUPTOOLS["package-dir"]["zest"] == "zest"
    assert {"gateway", "router", "engines", "policies", "bench"} <= set(
        SETUPTOOLS["package-dir"].values()
    )
