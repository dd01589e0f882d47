"""The env fleet on a real multi-node Ray cluster on this host: a head and two worker raylets (Ray's own
`ray.cluster_utils.Cluster`, every address 127.0.0.1), `agentrl fleet up` with 2 replicas per worker, two
steps of `agentrl train --task calc service.fleet=ray` (one group of 4 each, between a held-out evaluation
before and after), and one worker killed while its replicas hold sessions. The worker dies as a machine would:
its replicas' env services are SIGKILLed with it, leaving their warm pools and session sandboxes behind. The
run must finish, every episode must be in the store exactly once, the re-played ones must say so, Ray must
have restarted the dead worker's replicas on the surviving one, the dead services' sandboxes must be reaped by
the live replicas (same Docker engine), and after `agentrl fleet down` no sandbox of any of the fleet's
services may be left.

Nothing leaves loopback: the nodes bind 127.0.0.1 (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` makes Ray take
the loopback address as the node's), and usage stats are off. The run prints one JSON line of counts.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sandbox_leaks import assert_none_left, labelled_sandboxes, sandboxes_of_processes

ray = pytest.importorskip("ray", reason="the Ray fleet needs ray: pip install 'agentrl[ray]'")

pytestmark = [pytest.mark.slow, pytest.mark.docker]

# loopback addresses, no usage stats, and no memory monitor: on a host shared with other jobs Ray's would
# kill the replicas' workers whenever the host as a whole runs short, which is not the failure under test
CLUSTER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_memory_monitor_refresh_ms": "0",
}
# The worker is killed once its replicas hold a session and a sandbox: as a rule during the evaluation before
# training or the first step (round robin puts sessions on every replica), so that the rest of the run, a
# whole step at least, is played on the surviving worker alone.
STEPS, TASKS_PER_STEP, GROUP_SIZE, EVAL_TASKS = 2, 1, 4, 2
REAP_BOUND_S = 5.0 + 30.0 + 30.0  # the service's default orphan grace and reap interval, plus slack


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    for key, value in CLUSTER_ENV.items():
        monkeypatch.setenv(key, value)
    local = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    try:
        for _ in range(2):
            local.add_node(num_cpus=2, resources={"agentrl_env": 1}, node_ip_address="127.0.0.1")
        local.wait_for_nodes()
        yield local
    finally:
        local.shutdown()


def agentrl(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agentrl.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env())


def child_env() -> dict[str, str]:
    return {**os.environ, **CLUSTER_ENV, "AGENTRL_DB_URL": ""}


def replicas_of(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def sessions_on(urls: list[str]) -> int:
    total = 0
    for url in urls:
        try:
            total += int(httpx.get(f"{url}/healthz", timeout=2.0, trust_env=False).json()["sessions"])
        except httpx.HTTPError:
            continue
    return total


def wait_for_sessions(urls: list[str], train: subprocess.Popen[str], timeout_s: float) -> None:
    """Until a replica in `urls` holds a session (fails if the run ends first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert train.poll() is None, "the run ended before any session reached the worker to kill"
        if sessions_on(urls) > 0:
            return
        time.sleep(0.2)
    pytest.fail(f"no session reached {urls} within {timeout_s:g} s")


def wait_for_sandboxes(services: list[int], train: subprocess.Popen[str], timeout_s: float) -> None:
    """Until one of `services` owns a sandbox (a calc session takes one from the pool at its first python
    call); fails if the run ends first."""
    deadline = time.monotonic() + timeout_s
    while not sandboxes_of_processes(services):
        assert train.poll() is None, "the run ended before the worker to kill held a sandbox"
        assert time.monotonic() < deadline, f"no sandbox of {services} within {timeout_s:g} s"
        time.sleep(0.2)


def fleet_status_when_whole(address: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`agentrl fleet status` until every replica answers (exit 0) or `timeout_s` passes (the last one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = agentrl("fleet", "status", "--ray", address, timeout=120.0)
        if status.returncode == 0 or time.monotonic() > deadline:
            return status
        time.sleep(5.0)


def stored_episodes(db: Path) -> list[tuple[int, str, str, int, str]]:
    with sqlite3.connect(db) as connection:
        query = "SELECT step, split, uid, attempts, stop_reason FROM episodes ORDER BY id"
        return list(connection.execute(query))


def test_a_run_survives_losing_a_ray_worker_with_every_episode_stored_once(
    cluster: Any, tmp_path: Path, repo_root: Path
) -> None:
    address = cluster.address
    up = agentrl("fleet", "up", "--ray", address, "--replicas-per-node", "2")
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    replicas = replicas_of(up.stdout)
    assert len(replicas) == 4
    assert all(entry["url"].startswith("http://127.0.0.1:") for entry in replicas)
    nodes = sorted({entry["node_id"] for entry in replicas})
    assert len(nodes) == 2  # two replicas on each worker

    doomed = next(node for node in cluster.worker_nodes if node.node_id == nodes[1])
    doomed_urls = [entry["url"] for entry in replicas if entry["node_id"] == doomed.node_id]
    db = tmp_path / "store.db"
    overrides = [
        "service.fleet=ray",
        f"service.ray_address={address}",
        "name=fleet",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{db}",
        f"train.steps={STEPS}",
        f"train.tasks_per_step={TASKS_PER_STEP}",
        f"train.group_size={GROUP_SIZE}",
        f"eval.num_tasks={EVAL_TASKS}",
        "rollout.max_turns=2",
        "sampling.max_new_tokens=48",
        "rollout.infra_attempts=3",
    ]
    command = [sys.executable, "-m", "agentrl.cli.main", "train", "--task", "calc", *overrides]
    log = (tmp_path / "train.log").open("w")
    train = subprocess.Popen(
        command, cwd=repo_root, stdout=log, stderr=subprocess.STDOUT, text=True, env=child_env()
    )
    doomed_services = [entry["service_pid"] for entry in replicas if entry["node_id"] == doomed.node_id]
    services = {entry["service_pid"] for entry in replicas}
    try:
        wait_for_sessions(doomed_urls, train, timeout_s=600.0)
        wait_for_sandboxes(doomed_services, train, timeout_s=120.0)
        for pid in doomed_services:  # the machine dies: its services get no chance to clean up
            os.kill(pid, signal.SIGKILL)
        left_behind = {entry["Id"] for entry in sandboxes_of_processes(doomed_services)}
        cluster.remove_node(doomed, allow_graceful=False)  # the worker dies with its sessions mid-episode
        assert train.wait(timeout=900) == 0, (tmp_path / "train.log").read_text()[-4000:]
    finally:
        if train.poll() is None:
            train.kill()
        log.close()

    episodes = stored_episodes(db)
    train_rows = [row for row in episodes if row[1] == "train"]
    assert len(train_rows) == STEPS * TASKS_PER_STEP * GROUP_SIZE  # none lost, none twice
    assert len({row[2] for row in episodes}) == len(episodes)
    replayed = [row for row in episodes if row[3] > 1]
    assert replayed, "no episode was re-played: the killed worker held no session that mattered"
    assert all(row[4] != "infra_error" for row in episodes)  # each re-play succeeded on a live replica

    status = fleet_status_when_whole(address, timeout_s=180.0)  # Ray restarted the lost replicas
    restarted = replicas_of(status.stdout)
    assert status.returncode == 0, status.stdout + status.stderr[-2000:]
    assert len(restarted) == 4 and {entry["node_id"] for entry in restarted} == {nodes[0]}
    services |= {entry["service_pid"] for entry in restarted}
    outlived = reaped_within(left_behind, REAP_BOUND_S)
    down = agentrl("fleet", "down", "--ray", address)
    assert down.returncode == 0 and len(json.loads(down.stdout)["killed"]) == 4
    counts = {"train_episodes": len(train_rows), "stored": len(episodes), "replayed": len(replayed)}
    print(
        json.dumps({**counts, "left_by_the_killed_services": len(left_behind), "outlived_reaping": outlived})
    )
    assert left_behind, "the killed services held no sandbox: their death proved nothing"
    assert outlived == 0, f"{outlived} sandboxes of the killed services were not reaped"
    assert_none_left(sandboxes_of_processes(services), "the fleet's services after `fleet down`")


def reaped_within(ids: set[str], timeout_s: float) -> int:
    """How many of the sandboxes `ids` still exist after waiting up to `timeout_s` for them to go."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = ids & {entry["Id"] for entry in labelled_sandboxes({})}
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(1.0)
