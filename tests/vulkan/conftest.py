"""The Vulkan lane: the real server on llama.cpp's Vulkan build, on a real Vulkan driver.

Machines here have no GPU; Mesa's software Vulkan device (llvmpipe, "lavapipe") runs the
Vulkan backend for real, as llama.cpp's own CI does. The Vulkan build lives in a folder of its
own (`make vulkan-site`: .venv/vulkan-site), put first on the server's PYTHONPATH, so the
venv's CPU build is untouched. Run alone without it, the lane skips; under `make test`
(ZEST_REQUIRE_VULKAN=1) it is required, and a missing build fails.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server

ROUTES = Path(__file__).with_name("routes.yaml")
SITE = Path(os.environ.get("ZEST_VULKAN_SITE") or REPO / ".venv" / "vulkan-site")
LAVAPIPE_ICDS = "/usr/share/vulkan/icd.d/lvp_icd.*.json"


def _missing() -> str | None:
    if not (SITE / ".zest-llama-wheel").is_file() or "vulkan" not in _wheel():
        return f"no Vulkan build of llama-cpp-python in {SITE}: run make vulkan-site"
    if not glob.glob(LAVAPIPE_ICDS):
        return "no lavapipe (Mesa's software Vulkan driver): run make vulkan-deps"
    return None


def _wheel() -> str:
    return (SITE / ".zest-llama-wheel").read_text().strip()


@pytest.fixture(scope="session", autouse=True)
def vulkan_build() -> None:
    """Before any server of the lane starts: the Vulkan build and lavapipe are here."""
    missing = _missing()
    if missing is None:
        return
    if os.environ.get("ZEST_REQUIRE_VULKAN") == "1":
        pytest.fail(f"the Vulkan lane is required (ZEST_REQUIRE_VULKAN=1): {missing}")
    pytest.skip(missing)


def vulkan_env(*, software_gpu: bool = True) -> dict[str, str]:
    """The server's environment (over this one): the Vulkan build first on the path,
    lavapipe selected as the gpu (ggml skips CPU-type Vulkan devices unless told), the NPU
    emulated on a CPU thread."""
    path = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, "ZEST_EMULATE_DEVICES": "npu=cpu:1"}
    # Without a software gpu, no device at all: what a machine without a GPU sees, even
    # where a real GPU is present.
    env["GGML_VK_VISIBLE_DEVICES"] = lavapipe_index() if software_gpu else ""
    return env


def lavapipe_index() -> str:
    """lavapipe's index among the Vulkan devices (0 where it is the only one; a machine with
    a real GPU may list it first)."""
    try:
        summary = subprocess.run(
            ["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "0"
    found = re.findall(r"^GPU(\d+):(?:\n\t.*)*?\n\tdeviceName\s*=\s*llvmpipe", summary, re.M)
    return found[0] if found else "0"


@pytest.fixture(scope="session")
def vulkan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The lane's routes served on the Vulkan build, lavapipe as the gpu."""
    running = start_server(ROUTES, tmp_path_factory.mktemp("vulkan") / "zest.log", vulkan_env())
    yield running
    stop_server(running)
