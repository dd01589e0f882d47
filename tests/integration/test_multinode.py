"""Multi-node torchrun, run for real on this host: two torchrun "nodes" (`--nnodes 2 --node_rank 0/1
--nproc_per_node 1`, c10d rendezvous on 127.0.0.1) train the run that `agentrl train trainer.nproc=2` trains
on one node, and record the same metrics, episodes and final weights (tiny model, data-parallel rollouts
against one env service). Each node runs the multi-node recipe of docs/scaling.md, read from the page with its
placeholders filled in."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from dp_runs import (
    RUN_TIMEOUT_S,
    byte_sum_service,
    final_weights,
    free_port,
    nonces_per_round,
    run_env,
    run_train,
    step_metrics,
    stored_episodes,
    tiny_run_config,
)

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
SCALING = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
PLACEHOLDERS = ("NODE_RANK", "HOST:PORT", "TASK", "URL")


def scaling_recipe() -> str:
    """docs/scaling.md's multi-node command: the `torchrun --nnodes` line and its continuations."""
    text = SCALING.read_text()
    start = text.index("torchrun --nnodes")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.strip().removesuffix("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    return " ".join(lines)


def node_command(node_rank: int, endpoint: str, task: str, service_url: str) -> list[str]:
    """What one node runs: docs/scaling.md's recipe with its placeholders filled in."""
    fill = dict(zip(PLACEHOLDERS, (str(node_rank), endpoint, task, service_url), strict=True))
    words = shlex.split(scaling_recipe())
    assert words[0] == "torchrun" and set(PLACEHOLDERS) <= set(words), words
    return [TORCHRUN, *(fill.get(word, word) for word in words[1:])]


def run_nodes(commands: list[list[str]], cwd: Path, logs: Path) -> None:
    """Start every node, wait for all; on a failure or the timeout, kill them all and show the logs."""
    logs.mkdir(parents=True, exist_ok=True)
    nodes = []
    for index, command in enumerate(commands):
        with (logs / f"node{index}.log").open("w") as log:
            options = {"cwd": cwd, "env": run_env(), "stdout": log, "stderr": subprocess.STDOUT}
            nodes.append(subprocess.Popen(command, start_new_session=True, **options))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:  # a node that fails leaves the other waiting in a collective: stop at the first failure
        while time.monotonic() < deadline and any(node.poll() is None for node in nodes):
            if any(node.poll() not in (None, 0) for node in nodes):
                break
            time.sleep(0.5)
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    codes = [node.returncode for node in nodes]
    tails = [f"--- node {i}\n{(logs / f'node{i}.log').read_text()[-3000:]}" for i in range(len(codes))]
    assert codes == [0] * len(nodes), "\n".join(tails)


@pytest.mark.slow
def test_two_torchrun_nodes_train_the_single_node_two_rank_run(tmp_path: Path) -> None:
    runs, db = tmp_path / "runs", tmp_path / "store.db"
    with byte_sum_service(tmp_path / "service.log") as service:
        places = {"name": "two-nodes", "runs_dir": str(runs), "store": {"url": f"sqlite:///{db}"}}
        tiny_run_config(tmp_path, service.url, top=places, eval={"before": False})
        run_train(["train", "--task", "bytesum", "name=one-node", "trainer.nproc=2"], tmp_path)
        endpoint = f"127.0.0.1:{free_port()}"
        nodes = [node_command(rank, endpoint, "bytesum", service.url) for rank in (0, 1)]
        run_nodes(nodes, tmp_path, tmp_path / "logs")

    one_node, two_nodes = step_metrics(runs / "one-node"), step_metrics(runs / "two-nodes")
    assert sorted(one_node) == sorted(two_nodes) == [1, 2]
    assert nonces_per_round(db, "two-nodes") == {2}  # one world of two ranks, each rolling out its share
    assert one_node[1]["grad_norm"] > 0
    for step in one_node:
        assert two_nodes[step] == pytest.approx(one_node[step], rel=1e-5, abs=1e-6), step
    single, double = stored_episodes(db, "one-node"), stored_episodes(db, "two-nodes")
    assert [row[:7] for row in single] == [row[:7] for row in double]
    weights, other = final_weights(runs / "one-node"), final_weights(runs / "two-nodes")
    assert set(weights) == set(other)
    for name, value in weights.items():
        assert torch.allclose(value, other[name], atol=1e-5, rtol=0), name
