"""Async mode end to end: `agentrl train --task calc trainer.async_mode=true` with tiny budgets trains every
step on whole groups within the staleness bound and logs staleness, ESS, carried-over and dropped groups. The
tiny random model (the `tiny_model` fixture): what is tested is the loop's scheduling, weight versions and
bookkeeping, which do not depend on the model's size (SmolLM2 made this test take 85 s of a 2-core CPU
without native bf16; `bench/async_train.py` measures async mode on SmolLM2)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


@pytest.mark.docker
@pytest.mark.slow
def test_async_training_records_staleness_and_ess(repo_root: Path, tmp_path: Path, tiny_model: Path) -> None:
    db = tmp_path / "store.db"
    args = [
        "train",
        "--task",
        "calc",
        "name=async",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{db}",
        f"model.name={tiny_model}",
        "rollout.max_context_tokens=4096",  # one byte per token
        "train.steps=3",
        "train.tasks_per_step=2",
        "train.group_size=2",
        "eval.before=false",
        "eval.after=false",
        "sampling.max_new_tokens=32",
        "rollout.max_turns=2",
        "loss.entropy_coef=0.001",  # every episode is trained on, so every step updates the weights
        "trainer.async_mode=true",
        "trainer.max_staleness=1",
        "trainer.overprovision=1.5",  # 3 groups in flight for 2 per step
    ]
    result = subprocess.run(AGENTRL + args, cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]

    rows = [
        json.loads(line) for line in (tmp_path / "runs" / "async" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = {row["step"]: row for row in rows if "rollout_s" in row}
    assert sorted(steps) == [1, 2, 3]
    assert rows[0]["step"] == 0 and rows[0]["policy_copy_mb"] > 0  # the trainer's copy of the weights
    assert steps[1]["staleness_max"] == 0  # nothing was trained before step 1
    for row in steps.values():
        assert row["trained_episodes"] == 4  # two whole groups of two
        assert 0 <= row["staleness_mean"] <= row["staleness_max"] <= 1
        assert 0 < row["ess"] <= 1 and row["grad_norm"] > 0 and row["sync_s"] > 0
        assert {"carried_over_groups", "dropped_stale_groups", "sync_wait_s", "loop_s"} <= set(row)
    assert steps[3]["weights_version"] >= 1  # step 3's groups were sampled after a weight load
    with sqlite3.connect(db) as conn:
        status = conn.execute("select status from runs").fetchone()[0]
        per_step = conn.execute("select step, count(*) from episodes group by step order by step").fetchall()
        infos = [json.loads(info) for (info,) in conn.execute("select info from turns").fetchall()]
    assert status == "finished" and per_step == [(1, 4), (2, 4), (3, 4)]
    versions = {info["weights_version"] for info in infos}  # every turn says which weights sampled it
    assert 0 in versions and versions <= {0, 1, 2}
    assert (tmp_path / "runs" / "async" / "final" / "config.json").is_file()
