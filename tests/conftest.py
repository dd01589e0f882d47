"""Shared pytest fixtures: the repository root; Docker tests skip with a clear reason when no engine runs; in
pytest-xdist workers, the cores shared out and the long files first (agentrl.devtools.test_workers)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.devtools.test_workers import (
    THREADS_ENV,
    long_files_first,
    start_rank,
    usable_cores,
    worker_threads,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    threads = worker_threads(usable_cores(), os.environ)
    if threads is not None:
        import torch

        os.environ[THREADS_ENV] = str(threads)  # the agentrl processes this worker starts
        torch.set_num_threads(threads)


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def rank_of(item: pytest.Item) -> int:
    return start_rank(
        item.get_closest_marker("slow") is not None, item.get_closest_marker("docker") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:  # every worker collects; all of them reorder alike
        order = long_files_first([(item.nodeid.split("::")[0], rank_of(item)) for item in items])
        items[:] = [items[index] for index in order]
    if not any(item.get_closest_marker("docker") for item in items) or _docker_available():
        return
    skip = pytest.mark.skip(reason="no Docker engine answers `docker info`; run `make setup`")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder any command takes as `model.name=`: a random 2-layer Llama over the byte-level
    ChatML tokenizer (tests/tiny_models.py), for tests of the trainer's mechanics rather than of a model."""
    from tiny_models import tiny_llama
    from tiny_tokenizers import byte_tokenizer

    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_llama().save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session", autouse=True)
def no_leaked_sandboxes() -> Iterator[None]:
    """After the whole session, no sandbox container this test process started may still exist."""
    yield
    from agentrl.errors import SandboxUnavailable
    from agentrl.sandbox.docker import OWNER_LABEL, labelled_containers, owner, reap
    from agentrl.sandbox.pool import close_shared_pools

    close_shared_pools()  # envs' warm pools live for the process; their waiting sandboxes are not leaks
    try:
        leaked = labelled_containers({OWNER_LABEL: owner()})
    except SandboxUnavailable:
        return
    reap({OWNER_LABEL: owner()})
    assert not leaked, f"{len(leaked)} sandbox container(s) leaked (removed now): {leaked}"


REPLICA_TOKEN = "integration-token"


@pytest.fixture
def token_replicas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[object, object]]:
    """Two embedded env services (test envs preloaded) that require the bearer token `REPLICA_TOKEN`, which
    the environment hands to both them and the client; logs in tmp_path/a.log and b.log. Afterwards no
    sandbox either of them started may be left."""
    from sandbox_leaks import assert_none_left, sandboxes_of_processes

    from agentrl.service.embedded import EmbeddedService
    from agentrl.wire import TOKEN_ENV

    monkeypatch.setenv(TOKEN_ENV, REPLICA_TOKEN)
    with (
        EmbeddedService(tmp_path / "a.log", preload=["fixtures_envs"]) as a,
        EmbeddedService(tmp_path / "b.log", preload=["fixtures_envs"]) as b,
    ):
        pids = (a.pid, b.pid)
        yield a, b
    assert_none_left(sandboxes_of_processes(pids), "the replicas")
