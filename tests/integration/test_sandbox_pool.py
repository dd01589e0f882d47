"""SandboxPool against a real engine: warm acquire, background refill, discard, idle replacement, health
checks, fork, orphan reaping at start, and no leaks (all marked `docker`)."""

from __future__ import annotations

import os
import socket
import statistics
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest

from agentrl.errors import SandboxUnavailable
from agentrl.sandbox.docker import (
    OWNER_LABEL,
    SERVICE_LABEL,
    DockerSandbox,
    labelled_containers,
    reap,
)
from agentrl.sandbox.limits import SandboxConfig
from agentrl.sandbox.pool import PoolConfig, SandboxPool

pytestmark = pytest.mark.docker


@pytest.fixture
def service() -> Iterator[str]:
    name = f"agentrl-pool-test-{uuid.uuid4().hex[:8]}"
    yield name
    client = docker.from_env()
    for _ in range(50):  # removals run in the pool's background threads
        if not labelled_containers({SERVICE_LABEL: name}, client):
            return
        time.sleep(0.1)
    leaked = len(labelled_containers({SERVICE_LABEL: name}, client))
    reap({SERVICE_LABEL: name}, client)
    assert leaked == 0, f"{leaked} containers of {name} leaked"


def _containers(service: str) -> list[str]:
    client = docker.from_env()
    return [entry["Id"] for entry in labelled_containers({SERVICE_LABEL: service}, client)]


def test_acquire_is_a_dequeue_and_the_pool_refills(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=2), labels={SERVICE_LABEL: service}) as pool:
        assert pool.wait_ready(timeout_s=60)
        times = []
        for _ in range(4):
            assert pool.wait_ready(timeout_s=60)
            started = time.perf_counter()
            sandbox = pool.acquire()
            times.append(time.perf_counter() - started)
            assert sandbox.exec("echo hi").stdout == "hi\n"
            pool.release(sandbox)
        assert statistics.median(times) < 0.1  # the target is 30 ms; loose on a shared machine
        assert pool.wait_ready(timeout_s=60) and pool.ready == 2


def test_concurrent_acquires_each_get_their_own_sandbox(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=2), labels={SERVICE_LABEL: service}) as pool:
        with ThreadPoolExecutor(6) as executor:
            sandboxes = list(executor.map(lambda _: pool.acquire(timeout_s=60), range(6)))
        try:
            assert len({sandbox.container_id for sandbox in sandboxes}) == 6
            assert all(sandbox.exec("echo ok").stdout == "ok\n" for sandbox in sandboxes)
        finally:
            for sandbox in sandboxes:
                pool.release(sandbox)


def test_released_sandboxes_are_removed_not_reused(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=1), labels={SERVICE_LABEL: service}) as pool:
        with pool.sandbox() as first:
            first.exec("echo secret > /work/state")
            first_id = first.container_id
        with pool.sandbox() as second:
            assert second.container_id != first_id
            assert second.exec("cat /work/state").exit_code != 0
        deadline = time.monotonic() + 10
        while first_id in _containers(service) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first_id not in _containers(service)


def test_an_empty_pool_makes_callers_wait_for_a_start(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=0), labels={SERVICE_LABEL: service}) as pool:
        with pool.sandbox() as sandbox:
            assert sandbox.exec(["true"]).exit_code == 0
        assert pool.ready == 0


def test_idle_sandboxes_are_replaced(service: str) -> None:
    config = PoolConfig(size=1, max_idle_s=0.5)
    with SandboxPool(config=config, labels={SERVICE_LABEL: service}) as pool:
        assert pool.wait_ready(timeout_s=60)
        first = set(_containers(service))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (set(_containers(service)) - first and pool.ready):
            time.sleep(0.2)
        with pool.sandbox() as sandbox:
            assert sandbox.container_id not in first


def test_a_dead_warm_sandbox_is_skipped(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=2), labels={SERVICE_LABEL: service}) as pool:
        assert pool.wait_ready(timeout_s=60)
        victim = pool._ready[0][1]
        docker.from_env().containers.get(victim.container_id).remove(force=True)
        with pool.sandbox() as sandbox:
            assert sandbox is not victim and sandbox.exec("echo ok").stdout == "ok\n"


def test_a_missing_image_fails_acquire_with_the_cause(service: str) -> None:
    config = SandboxConfig(image="agentrl/no-such-image:latest")
    with SandboxPool(config, PoolConfig(size=1), labels={SERVICE_LABEL: service}) as pool:
        with pytest.raises(SandboxUnavailable, match="make setup"):
            pool.acquire(timeout_s=3)


def test_fork_through_the_pool(service: str) -> None:
    with SandboxPool(config=PoolConfig(size=2), labels={SERVICE_LABEL: service}) as pool:
        with pool.sandbox() as parent:
            parent.write_file("/work/a.txt", "state")
            child = pool.fork(parent)
            try:
                assert child.read_file("/work/a.txt") == "state"
            finally:
                pool.release(child)


def test_starting_a_pool_reaps_orphans_of_dead_processes(service: str) -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    orphan = DockerSandbox(labels={SERVICE_LABEL: service, OWNER_LABEL: f"{socket.gethostname()}:{pid}"})
    orphan.start()
    orphan_id = orphan.container_id
    with SandboxPool(config=PoolConfig(size=0), labels={SERVICE_LABEL: service}):
        assert orphan_id not in _containers(service)
    orphan.close()


def test_close_removes_every_waiting_sandbox(service: str) -> None:
    pool = SandboxPool(config=PoolConfig(size=3), labels={SERVICE_LABEL: service})
    pool.start()
    assert pool.wait_ready(timeout_s=60)
    pool.close()
    assert _containers(service) == []
