"""Reading routes.yaml safely: a regular file of bounded size, YAML whose aliases cannot expand
into a bomb, and no key given twice (a pasted second `chat:` would silently win).

Everything here takes time linear in the file's size: the composed document is a graph whose
aliases are shared nodes, and its size once they are expanded is worked out once per node."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zest.errors import ConfigError

__all__ = ["MAX_ALIAS_NODES", "MAX_FILE_BYTES", "YamlSize", "read_routes_file", "safe_yaml"]

# A routes file is hand-written: a megabyte is already far more than any needs.
MAX_FILE_BYTES = 1024 * 1024
# YAML nodes that aliases add once expanded (beyond those written in the file): generous for
# anchors reused, fatal to alias bombs. What is written out is bounded by MAX_FILE_BYTES.
MAX_ALIAS_NODES = 100_000
_COUNT_CAP = 2**62  # an expanded size past any bound a file may have


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
    expands by more than MAX_ALIAS_NODES through aliases, or gives a key twice."""
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


@dataclass(frozen=True)
class YamlSize:
    """A composed document's nodes: as written (each anchored node once) and as construction
    sees them, every alias expanded (capped at 2**62)."""

    written: int
    expanded: int

    @property
    def added_by_aliases(self) -> int:
        return self.expanded - self.written


def yaml_size(root: yaml.Node) -> YamlSize:
    """The document's size, each node visited once (an alias is the node it names, shared): a
    node's expanded size is worked out after its children's and kept. ValueError when an
    alias names a node that holds it (the document would never end)."""
    sizes: dict[int, int] = {}
    started: set[int] = set()  # the nodes on the path being expanded: its ancestors
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            expanded = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(expanded, _COUNT_CAP)  # an exponential bomb's count stays small
            started.discard(key)
            continue
        if key in sizes:
            continue
        if key in started:
            raise ValueError("an alias names a node that holds it")
        started.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return YamlSize(written=len(sizes), expanded=sizes[id(root)])


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_size(root: yaml.Node, filename: str) -> None:
    """Refuse a document whose aliases would expand it past MAX_ALIAS_NODES more values."""
    try:
        size = yaml_size(root)
    except ValueError:
        raise ConfigError(
            [
                f"{filename}: an alias names a value that holds it, so the YAML never ends: "
                "write that part out instead"
            ]
        ) from None
    if size.added_by_aliases > MAX_ALIAS_NODES:
        raise ConfigError(
            [
                f"{filename}: the YAML's aliases expand it by more than {MAX_ALIAS_NODES} "
                "values (an alias bomb?): write the repeated parts out, or reuse fewer"
            ]
        )


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _problem(exc: yaml.YAMLError) -> str:
    problem = str(getattr(exc, "problem", None) or exc)
    if "found character '\\t'" in problem:
        return "a tab: YAML indents with spaces only: replace the tabs with spaces"
    return f"{problem}: fix the syntax there"
