"""Workspace state keys in real Docker sandboxes: equal files give equal keys, a changed file changes the key,
a .pyc does not, and the digest exec is cheap enough for every step (p50 printed; run with `-s`)."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from agentrl.sandbox.docker import SESSION_LABEL, DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.state import WorkspaceKeyConfig, workspace_state_key

pytestmark = pytest.mark.docker

# 100 files in 10 folders, written by one exec so setup stays fast
MAKE_FILES = """
import os
for i in range(100):
    folder = f"/work/pkg{i % 10}"
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/mod{i}.py", "w") as handle:
        handle.write(f"VALUE = {i}\\n" * 20)
"""


@pytest.fixture(scope="module")
def session() -> Iterator[str]:
    name = f"state-key-test-{uuid.uuid4().hex[:8]}"
    yield name
    client = docker.from_env()
    try:
        leaked = client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={name}"})
        assert not leaked, f"leaked containers: {[c.id for c in leaked]}"
    finally:
        client.close()


@pytest.fixture(scope="module")
def sandboxes(session: str) -> Iterator[tuple[DockerSandbox, DockerSandbox]]:
    config = SandboxConfig(command_timeout_s=10.0)
    with (
        DockerSandbox(config, {SESSION_LABEL: session}) as first,
        DockerSandbox(config, {SESSION_LABEL: session}) as second,
    ):
        for sandbox in (first, second):
            assert sandbox.exec(["python3", "-c", MAKE_FILES]).exit_code == 0
        yield first, second


def test_same_files_same_key_changes_change_it_pyc_does_not(
    sandboxes: tuple[DockerSandbox, DockerSandbox],
) -> None:
    first, second = sandboxes
    base = workspace_state_key(first)
    assert workspace_state_key(second) == base
    second.write_file("/work/pkg3/mod3.py", "VALUE = -1\n")
    changed = workspace_state_key(second)
    assert changed != base
    first.exec("mkdir -p /work/pkg3/__pycache__ && echo junk > /work/pkg3/__pycache__/mod3.cpython-311.pyc")
    first.exec("echo junk > /work/pkg4/stray.pyc")
    assert workspace_state_key(first) == base
    first.write_file("/work/pkg3/mod3.py", "VALUE = -1\n")
    assert workspace_state_key(first) == changed
    assert workspace_state_key(first, WorkspaceKeyConfig(ignore=())) != changed


def test_digest_of_100_files_is_cheap(sandboxes: tuple[DockerSandbox, DockerSandbox]) -> None:
    first, _ = sandboxes
    assert int(first.exec("find /work -name '*.py' | wc -l").stdout) == 100
    workspace_state_key(first)  # warm the page cache and the interpreter's files
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        workspace_state_key(first)
        timings.append(time.perf_counter() - started)
    p50 = statistics.median(timings) * 1000
    print(
        f"\nworkspace digest, 100 files: p50 {p50:.1f} ms, min {min(timings) * 1000:.1f} ms, "
        f"max {max(timings) * 1000:.1f} ms"
    )
    assert p50 < 150  # target 50 ms; loose because the CI machine's 2 cores are shared
