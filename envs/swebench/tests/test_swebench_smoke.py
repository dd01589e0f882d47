"""Smoke: `agentrl train --task swebench train.steps=1` end to end on CPU with tiny budgets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.docker
@pytest.mark.slow
def test_train_one_step_on_swebench(tmp_path: Path) -> None:
    built = subprocess.run(
        ["bash", "scripts/build_swebench_images.sh"], cwd=REPO, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    overrides = [
        "name=swebench-smoke",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        "train.steps=1",
        "train.tasks_per_step=1",
        "train.group_size=2",
        "eval.before=false",
        "eval.after=false",
        "sampling.max_new_tokens=32",
        "rollout.max_turns=2",
        "env.kwargs.max_steps=2",
    ]
    command = [sys.executable, "-m", "agentrl.cli.main", "train", "--task", "swebench", *overrides]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics_file = tmp_path / "runs" / "swebench-smoke" / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [m["step"] for m in metrics if "reward_mean" in m] == [1]
