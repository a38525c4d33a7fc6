"""The routes file a command reads when none is given, and `zest init`, which writes the
packaged default out for editing.

Without --routes (or ZEST_ROUTES), a command reads ./routes.yaml, else the default routes.yaml
shipped inside the package (the bundled SmolLM2 on every task), and says so.
"""

from __future__ import annotations

import argparse
import logging
from importlib.resources import files
from pathlib import Path

from zest.errors import CommandError

__all__ = ["ROUTES_HELP", "add_init_command", "packaged_routes", "routes_file"]

log = logging.getLogger("zest")

LOCAL = Path("routes.yaml")
ROUTES_HELP = "routes file (default: $ZEST_ROUTES, else ./routes.yaml, else the packaged default)"


def packaged_routes() -> Path:
    """The default routes.yaml: package data of zest in an installed wheel (zest/routes.yaml,
    which setup.py's build step puts there); from a source checkout (an editable install) the
    repository's own, at its root beside the zest/ folder."""
    package = Path(str(files("zest")))
    shipped = package / LOCAL.name
    return shipped if shipped.is_file() else package.parent / LOCAL.name


def routes_file(given: Path | None) -> Path:
    """`given` (--routes or ZEST_ROUTES), else ./routes.yaml, else the packaged default."""
    if given is not None:
        return given
    if LOCAL.exists():
        return LOCAL
    packaged = packaged_routes()
    log.warning(
        "no routes file given (--routes, ZEST_ROUTES) and no ./routes.yaml: using the packaged "
        "default %s (`zest init` writes it out for editing)",
        packaged,
    )
    return packaged


def add_init_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "init", help="write the packaged default routes.yaml out for editing"
    )
    command.add_argument(
        "path", nargs="?", type=Path, default=LOCAL, help="file or folder (default: routes.yaml)"
    )
    command.add_argument("--force", action="store_true", help="overwrite a file already there")
    command.set_defaults(func=_init)


def _init(args: argparse.Namespace) -> int:
    target: Path = args.path / LOCAL.name if args.path.is_dir() else args.path
    if target.exists() and not args.force:
        raise CommandError(f"{target} already exists: pass --force to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(packaged_routes().read_text(encoding="utf-8"), encoding="utf-8")
    serve = "zest serve" if target == LOCAL else f"zest serve --routes {target}"
    print(f"wrote {target}: edit it, then `zest check {target}` and `{serve}`")
    return 0
