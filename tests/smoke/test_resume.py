"""Exact resume: a run killed with SIGKILL after step 2 and resumed from its checkpoint records the same
step 3 as a run that was never interrupted (seeded sampling, so rollouts do not depend on batching); in one
process, and with `trainer.nproc=2` (torchrun, FSDP2 shards and per-rank RNG states). The calc env with a
tiny random model (the `tiny_model` fixture): what is tested is the trainer's checkpoint, RNG and store
bookkeeping, which do not depend on the model's size (SmolLM2 made this test take 24 minutes)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
TIMINGS = ("_s", "_mb")  # wall-clock seconds and process memory peaks differ between runs by nature


def train_args(runs: Path, db: Path, name: str, nproc: int, model: Path) -> list[str]:
    return [
        "train",
        "--task",
        "calc",
        f"name={name}",
        f"runs_dir={runs}",
        f"store.url=sqlite:///{db}",
        f"model.name={model}",
        "rollout.max_context_tokens=4096",  # one byte per token
        "train.steps=3",
        "train.tasks_per_step=2",
        "train.group_size=2",
        "eval.before=false",
        "eval.after=false",
        "sampling.max_new_tokens=48",
        "rollout.max_turns=3",
        "loss.entropy_coef=0.001",  # every episode is trained on, so every step really updates the weights
        "rollout.seeded_sampling=true",
        # the hf engine samples a seeded request alone, so its logits cannot depend on batching; the cached
        # engine honours the seeds too, but its bf16 logits move slightly with the batch's composition
        "engine.kind=hf",
        "trainer.checkpoint_every=1",
        "optim.lr=1e-4",
        f"trainer.nproc={nproc}",
    ]


def step_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        row["step"]: {k: v for k, v in row.items() if not k.endswith(TIMINGS)}
        for row in rows
        if "rollout_s" in row
    }


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_killed_run_resumes_exactly(repo_root: Path, tmp_path: Path, nproc: int, tiny_model: Path) -> None:
    runs, db = tmp_path / "runs", tmp_path / "store.db"
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    straight = subprocess.run(
        AGENTRL + train_args(runs, db, "straight", nproc, tiny_model),
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]

    killed = subprocess.Popen(
        AGENTRL + train_args(runs, db, "killed", nproc, tiny_model),
        cwd=repo_root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = runs / "killed" / "checkpoints" / "step-000002" / "state.json"
    deadline = time.monotonic() + 900
    while not marker.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the run never wrote its step-2 checkpoint"
    os.killpg(killed.pid, signal.SIGKILL)  # the trainer and its embedded service, mid-run
    killed.wait()

    resumed = subprocess.run(
        AGENTRL + [*train_args(runs, db, "killed", nproc, tiny_model), f"trainer.resume={runs / 'killed'}"],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected, got = step_metrics(runs / "straight"), step_metrics(runs / "killed")
    assert sorted(got) == [1, 2, 3]
    assert all(expected[step]["grad_norm"] > 0 and "loss" in expected[step] for step in (1, 2, 3))
    for step in (1, 2, 3):
        assert got[step] == pytest.approx(expected[step], rel=1e-6, abs=1e-9), step
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("select id, status from runs where name = 'killed'").fetchone()
        per_step = conn.execute(
            "select step, count(*) from episodes where run_id = ? group by step order by step", (run_id,)
        ).fetchall()
    assert status == "finished"
    assert per_step == [(1, 4), (2, 4), (3, 4)]  # every episode once, none from the killed attempt at step 3
