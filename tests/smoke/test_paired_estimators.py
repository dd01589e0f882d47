"""Paired comparisons are real: two training runs that differ only in their credit estimator (GRPO and
GiGPO), started from the same weights with the same seed and seeded sampling, play the identical first
step, token for token, reward for reward, so any later difference between them is the estimators' doing.
The cached engine decodes seeded requests batch-invariantly (`engine.cached.deterministic`, the default),
so which episodes happen to be decoded together cannot change a token. The maze env (no sandbox) with a
tiny random model (`tiny_model`): what is tested is the sampling path, not a model's skill. The second
step is compared too: it is sampled from weights the two estimators updated differently, so it shows the
test can tell the runs apart.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]

pytestmark = [pytest.mark.slow]


def train(repo_root: Path, tmp_path: Path, model: Path, estimator: str) -> None:
    args = [
        "train",
        "--task",
        "maze",
        f"name={estimator}",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        f"model.name={model}",
        f"credit.estimator={estimator}",
        "engine.kind=cached",
        "rollout.seeded_sampling=true",
        "rollout.max_context_tokens=4096",  # one byte per token
        "rollout.max_turns=4",
        "sampling.max_new_tokens=24",
        "train.steps=2",
        "train.tasks_per_step=3",
        "train.group_size=4",
        "eval.before=false",
        "eval.after=false",
        "loss.entropy_coef=0.01",  # every episode is trained on, so the first update moves the weights
        "optim.lr=1e-2",
        "train.seed=7",
    ]
    result = subprocess.run(
        AGENTRL + args,
        cwd=repo_root,
        env={**os.environ, "AGENTRL_DB_URL": ""},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def played(db: Path, run: str, step: int) -> list[tuple[str, float, list[str]]]:
    """(task, reward, each turn's text) of every episode of `run` at `step`, in a stable order."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select id from runs where name = ?", (run,)).fetchone()
        episodes = conn.execute(
            "select id, task_id, reward from episodes where run_id = ? and step = ? order by id",
            (run_id, step),
        ).fetchall()
        rows = []
        for episode_id, task_id, reward in episodes:
            texts = conn.execute(
                'select text from turns where episode_id = ? order by "index"', (episode_id,)
            ).fetchall()
            rows.append((str(task_id), float(reward), [str(text) for (text,) in texts]))
    return sorted(rows)


def test_grpo_and_gigpo_play_the_same_first_step_from_the_same_start_and_seed(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    train(repo_root, tmp_path, tiny_model, "grpo")
    train(repo_root, tmp_path, tiny_model, "gigpo")
    db = tmp_path / "store.db"
    first_grpo, first_gigpo = played(db, "grpo", 1), played(db, "gigpo", 1)
    assert len(first_grpo) == 12
    assert first_grpo == first_gigpo
    assert played(db, "grpo", 2) != played(db, "gigpo", 2)
