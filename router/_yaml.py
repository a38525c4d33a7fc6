"""Reading routes.yaml safely: a regular file of bounded size, YAML whose aliases cannot expand
into a bomb, and no key given twice (a pasted second `chat:` would silently win)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from zest.errors import ConfigError

__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "read_routes_file", "safe_yaml"]

# A routes file is hand-written: a megabyte is already far more than any needs.
MAX_FILE_BYTES = 1024 * 1024
# YAML nodes after aliases are expanded: generous for anchors reused, fatal to alias bombs.
MAX_NODES = 100_000


def read_routes_file(path: Path) -> str:
    """The text of a regular routes file (never a FIFO or a device, which would block or never
    end), refused past MAX_FILE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(
            [f"{path}: file not found: pass an existing file with --routes or ZEST_ROUTES"]
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(
                [
                    f"{path}: a loop of symbolic links leads to no file: point the link at the "
                    "routes file"
                ]
            ) from None
        raise ConfigError([f"{path}: cannot read the file: {exc.strerror}"]) from exc
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError([f"{path}: not a regular file: point --routes at a routes.yaml"])
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            [f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB: a routes file is a few KiB"]
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"{path}: not UTF-8 text (byte {exc.start}): save it as UTF-8"]
        ) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping, naming both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, str) and key in seen:
                raise _DuplicateKey(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def safe_yaml(text: str, filename: str) -> Any:
    """The YAML document in `text`, refused (ConfigError naming the file) when it is invalid,
    expands past MAX_NODES through aliases, or gives a key twice."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, filename)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{filename}: invalid YAML{_where(exc)}: {_problem(exc)}"]) from None
    except _DuplicateKey as dup:
        raise ConfigError(
            [
                f"{filename}: key {dup.key!r} is given twice in the same mapping (lines "
                f"{dup.first} and {dup.second}): keep one"
            ]
        ) from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, filename: str) -> None:
    """Count nodes as construction would see them, aliases expanded, up to MAX_NODES."""
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ConfigError(
                [
                    f"{filename}: the YAML expands to more than {MAX_NODES} values through its "
                    "aliases (an alias bomb?): write the repeated parts out, or reuse fewer"
                ]
            )
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _problem(exc: yaml.YAMLError) -> str:
    problem = str(getattr(exc, "problem", None) or exc)
    if "found character '\\t'" in problem:
        return "a tab: YAML indents with spaces only: replace the tabs with spaces"
    return f"{problem}: fix the syntax there"
