"""`zest system-info`: this machine's devices as a zest started here would see them.

The same inventory `serve` detects and GET /api/v1/system-info shows (without the loaded
models: this command loads nothing): the devices routes may use, how each was found, what
llama.cpp's build can run on (ggml's own device registry, with each device's memory), and
every probe's result.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from zest.gateway.cli._settings import settings_from
from zest.gateway.cli._tables import print_table

__all__ = ["add_system_info_command", "format_system_info"]


def add_system_info_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser(
        "system-info", help="show this machine's devices, as zest detects them (loads nothing)"
    )
    command.add_argument("--json", action="store_true", help="print them as JSON")
    command.set_defaults(func=_system_info)


def _system_info(args: argparse.Namespace) -> int:
    from zest.engines import detect_inventory
    from zest.gateway.serving import describe_inventory

    settings = settings_from()
    described = describe_inventory(detect_inventory(settings.emulate_devices))
    if args.json:
        print(json.dumps(described, indent=2))
    else:
        format_system_info(described)
    return 0


def format_system_info(described: dict[str, Any]) -> None:
    print_table(
        ("device", "engines", "memory", "detected by", "detail"),
        (
            (d["label"], ", ".join(d["engines"]) or "none", _mib(d["memory_total"]),
             d["detected_by"], d["detail"])
            for d in described["devices"]
        ),
    )  # fmt: skip
    print()
    print_table(
        ("llama.cpp device", "kind", "memory (free/total)", "description"),
        (
            (g["name"], g["kind"], f"{_mib(g['memory_free'])}/{_mib(g['memory_total'])}",
             g["description"])
            for g in described["ggml_devices"]
        ),
    )  # fmt: skip
    print()
    print_table(("probe", "result"), ((p["source"], p["result"]) for p in described["probes"]))


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size // (1024 * 1024)} MiB"
