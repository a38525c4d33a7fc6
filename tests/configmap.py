"""A Kubernetes ConfigMap volume, laid out and updated the way the kubelet's atomic writer does
it, so the routes-file watcher is tested against the real sequence of file-system changes:

    folder/routes.yaml -> ..data/routes.yaml
    folder/..data      -> ..2024_01_01_00_00_00.1      (a link to the current version)
    folder/..2024_01_01_00_00_00.1/routes.yaml         (the files of that version)

An update writes the new version's folder, makes a link `..data_tmp` to it, renames that link
over `..data` (one atomic swap: readers see the old files or the new ones, never a mix) and
removes the old version's folder. The key's own link (`routes.yaml`) never changes.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

__all__ = ["ConfigMapVolume"]

_versions = itertools.count(1)


class ConfigMapVolume:
    def __init__(self, folder: Path, files: dict[str, str]) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        version = self._write_version(files)
        os.symlink(version.name, folder / "..data")
        for name in files:
            os.symlink(f"..data/{name}", folder / name)

    def path(self, name: str) -> Path:
        """The path a pod reads the key by (a link through ..data)."""
        return self.folder / name

    def update(self, files: dict[str, str]) -> None:
        """The kubelet's update: new version folder, link swap, old folder removed."""
        old = (self.folder / "..data").resolve()
        version = self._write_version(files)
        tmp = self.folder / "..data_tmp"
        os.symlink(version.name, tmp)
        os.replace(tmp, self.folder / "..data")
        shutil.rmtree(old)

    def _write_version(self, files: dict[str, str]) -> Path:
        version = self.folder / f"..2024_01_01_00_00_00.{next(_versions)}"
        version.mkdir()
        for name, text in files.items():
            (version / name).write_text(text)
        return version
