"""`make docs` fails on a broken link: its recipe, as the Makefile runs it, on a copy of the
site with one link to a page that does not exist (`mkdocs --quiet` would have let it pass)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def docs_recipe() -> str:
    """The shell line of the Makefile's docs target, $(BIN) made this interpreter's folder."""
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    start = lines.index("docs: install")
    (recipe,) = [line for line in lines[start + 1 : start + 3] if line.startswith("\t")]
    return recipe.strip().replace("$(BIN)", str(Path(sys.executable).parent))


def test_a_broken_link_fails_the_docs_build(tmp_path: Path) -> None:
    shutil.copy(REPO / "mkdocs.yml", tmp_path)
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](no-such-page.md)\n")
    built = subprocess.run(
        docs_recipe(),
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode != 0
    assert "a link 'no-such-page.md', but the target is not found" in built.stderr
    assert "in strict mode" in built.stdout + built.stderr
