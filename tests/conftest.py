"""Shared pytest fixtures: the repository root; Docker tests skip with a clear reason when no engine runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("docker") for item in items) or _docker_available():
        return
    skip = pytest.mark.skip(reason="no Docker engine answers `docker info`; run `make setup`")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
