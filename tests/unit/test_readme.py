"""The README as a new user reads it: the two set-up commands stated exactly, a quick start of
ten lines at most, a routes.yaml example the loader accepts, and links to docs pages that exist
and are in the site's nav. The site's own links are checked by `make docs` (mkdocs --strict)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from zest.router import parse_routes

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def section(title: str) -> str:
    """The text under a `## title` heading, up to the next one."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def blocks(text: str, lang: str) -> list[str]:
    return [body for found, body in FENCE.findall(text) if found == lang]


def commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_two_set_up_commands_are_stated_exactly() -> None:
    first = blocks(README, "sh")[0]
    assert commands(first) == ["make serve", "make test"]
    assert "Those are the only two set-up commands." in README


def test_the_quick_start_goes_from_serve_to_zest_chat_in_ten_lines() -> None:
    (quick,) = blocks(section("Quick start"), "sh")
    lines = quick.splitlines()
    assert len(lines) <= 10
    steps = ["make serve", "/v1/ready", "/v1/chat/completions", ":8000/ ", "zest chat"]
    found = [next(i for i, line in enumerate(lines) if step in line) for step in steps]
    assert found == sorted(found), "the steps come in the order a new user takes them"


def test_the_routes_yaml_example_is_a_valid_routes_file() -> None:
    (example,) = blocks(section("routes.yaml"), "yaml")
    config = parse_routes(example, "README.md")
    assert config.routes["chat"].model == "smollm2"


def test_every_docs_link_leads_to_a_page_of_the_site() -> None:
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README))
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = set(re.findall(r"'([\w-]+\.md)'", str(nav)))
    assert linked, "the README links into the docs"
    assert linked <= pages, f"not in mkdocs.yml's nav: {sorted(linked - pages)}"
    assert all((REPO / "docs" / page).is_file() for page in linked)
