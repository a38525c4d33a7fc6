"""The wheel pip builds from what the image copies (deploy/Dockerfile): one zest/ tree holding
every module of the folders pyproject.toml's package-dir maps, under its zest.* name, with the
web page, the bench article and the default routes.yaml (setup.py's build step); and, installed
on its own, a zest that imports from it and finds its routes.yaml there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
DATA = {
    "zest/routes.yaml",
    "zest/gateway/http/web/index.html",
    "zest/gateway/http/web/app.js",
    "zest/gateway/http/web/style.css",
    "zest/bench/bench_article.txt",
}


def installed_path(package: str, folder: str, path: Path) -> str:
    """engines/_pool.py is zest/engines/_pool.py in the wheel."""
    return "/".join((*package.split("."), *path.relative_to(REPO / folder).parts))


def source_modules() -> set[str]:
    return {
        installed_path(package, folder, path)
        for package, folder in SETUPTOOLS["package-dir"].items()
        for path in (REPO / folder).rglob("*.py")
    }


def run(command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the files the Dockerfile copies, so the checkout gets no build/."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md", "routes.yaml"):
        shutil.copy(REPO / name, source / name)
    caches = shutil.ignore_patterns("__pycache__")
    for folder in SETUPTOOLS["package-dir"].values():
        shutil.copytree(REPO / folder, source / folder, ignore=caches)
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out)]
    run([*build, str(source)])
    (built,) = out.glob("zest_gateway-*.whl")
    return built


def test_the_wheel_is_one_zest_tree_with_its_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
        routes = archive.read("zest/routes.yaml")
    assert {n for n in names if n.endswith(".py")} == source_modules()
    assert {n for n in names if not n.endswith(".py")} == DATA
    assert routes == (REPO / "routes.yaml").read_bytes()


def test_installed_zest_imports_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    """PYTHONPATH puts the wheel's files before this checkout's editable install."""
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    run([*install, str(site), str(wheel)])
    code = (
        "import zest, zest.engines, zest.gateway.http, zest.bench\n"
        "from zest.gateway.cli._init import packaged_routes\n"
        "for found in (zest, zest.engines, zest.gateway.http, zest.bench):\n"
        "    print(found.__file__)\n"
        "print(packaged_routes())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    assert run([sys.executable, "-c", code], cwd=tmp_path, env=env).splitlines() == [
        str(site / "zest/__init__.py"),
        str(site / "zest/engines/__init__.py"),
        str(site / "zest/gateway/http/__init__.py"),
        str(site / "zest/bench/__init__.py"),
        str(site / "zest/routes.yaml"),
    ]
