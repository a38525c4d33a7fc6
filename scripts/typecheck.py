"""mypy over the zest namespace as setuptools installs it: every file under its zest.* name.

    .venv/bin/python scripts/typecheck.py [MYPY OPTIONS]     (what `make lint` runs)

The top-level folders are packages of the zest namespace through pyproject.toml's
[tool.setuptools.package-dir] (engines/ is zest.engines), and mypy cannot follow that: it names
a module by its place on disk, so plain `mypy` checks engines/_pool.py as `engines._pool` and
finds no `zest.engines` for the imports that name it. This runs mypy's own build over the files
[tool.mypy] lists (its exclude applied), each renamed as package-dir installs it, with the
options of [tool.mypy] and any given here.
"""

from __future__ import annotations

import sys
import time
import tomllib
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """Each mapped package and its folder, the deepest folder first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config["tool"]["setuptools"]["package-dir"].items()
    return dict(sorted(((name, ROOT / folder) for name, folder in mapped),
                       key=lambda item: -len(item[1].parts)))  # fmt: skip


def installed_name(path: Path, packages: dict[str, Path]) -> str:
    """The module a file is installed as: engines/_pool.py is zest.engines._pool."""
    for package, folder in packages.items():
        if path.is_relative_to(folder):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise SystemExit(f"{path}: in no folder of [tool.setuptools.package-dir]")


def main(args: list[str]) -> int:
    started = time.time()
    fscache = FileSystemCache()
    found, options = process_options(args, fscache=fscache)
    packages = package_dirs()
    sources = []
    for source in found:
        path = Path(source.path or "").resolve()
        sources.append(BuildSource(source.path, installed_name(path, packages), base_dir=str(ROOT)))
    _result, messages, blockers = run_build(
        sources, options, fscache, started, sys.stdout, sys.stderr
    )
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    errors, _notes, files = util.count_stats(messages)
    if errors:
        print(formatter.format_error(errors, files, len(sources), blockers=blockers))
        return 2 if blockers else 1
    print(formatter.format_success(len(sources), options.color_output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
