"""Smoke tests: every CLI command end to end with tiny budgets (real model, real sandbox, real store)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_log import history_rows

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


def run_cli(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    return subprocess.run(AGENTRL + args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_envs_list_shows_the_calc_plugin(repo_root: Path) -> None:
    result = run_cli(["envs", "list"], repo_root, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "agentrl/Calc-v0" in result.stdout
    assert "python" in result.stdout and "submit" in result.stdout


def test_unknown_task_is_a_clear_error(repo_root: Path) -> None:
    result = run_cli(["train", "--task", "no-such-task"], repo_root, timeout=120)
    assert result.returncode == 2
    assert "no config for task 'no-such-task'" in result.stderr
    assert "calc" in result.stderr


def test_unknown_override_key_is_a_clear_error(repo_root: Path) -> None:
    result = run_cli(["train", "--task", "calc", "train.stepz=2"], repo_root, timeout=120)
    assert result.returncode == 2
    assert "unknown key(s) ['stepz'] in train" in result.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_train_two_steps_writes_rows_to_the_store(repo_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    result = run_cli(
        [
            "train",
            "--task",
            "calc",
            "name=smoke",
            f"runs_dir={tmp_path / 'runs'}",
            f"store.url=sqlite:///{db}",
            "train.steps=2",
            "train.tasks_per_step=2",
            "train.group_size=2",
            "eval.num_tasks=2",
            "sampling.max_new_tokens=48",
            "rollout.max_turns=2",
            "metrics.wandb_project=agentrl-smoke",
            "metrics.wandb_mode=offline",
        ],
        repo_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out before: success" in result.stdout
    assert "held-out after : success" in result.stdout

    metrics = [
        json.loads(line) for line in (tmp_path / "runs" / "smoke" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics if "reward_mean" in m] == [1, 2]
    assert list((tmp_path / "runs" / "smoke" / "tensorboard").glob("events.out.tfevents.*"))
    mirrored = history_rows(tmp_path / "runs" / "smoke")  # the W&B mirror, offline
    mirrored_rewards = {row["_step"]: row["reward_mean"] for row in mirrored if "reward_mean" in row}
    assert mirrored_rewards == {
        m["step"]: pytest.approx(m["reward_mean"], abs=1e-6) for m in metrics if "reward_mean" in m
    }
    with sqlite3.connect(db) as conn:
        counts = {
            t: conn.execute(f"select count(*) from {t}").fetchone()[0]
            for t in ("runs", "episodes", "turns", "metrics")
        }
        status = conn.execute("select status from runs").fetchone()[0]
        finishes = {row[0] for row in conn.execute("select finish_reason from turns")}
        prompts = conn.execute("select count(*) from prompts").fetchone()[0]
        unprompted = conn.execute("select count(*) from episodes where prompt_id is null").fetchone()[0]
        sampled = conn.execute(
            "select completion_tokens, token_pieces, length(token_logprobs) from turns"
        ).fetchall()
    assert counts["runs"] == 1 and status == "finished"
    assert finishes <= {"stop", "length"} and finishes  # the engine's, on every turn
    assert prompts == 1 and unprompted == 0  # calc's tools, stored once for every episode
    # every turn's sampled tokens: the tokenizer's piece of each, and its float32 sampler log-prob
    assert sampled and all(
        count == 0 or (len(json.loads(pieces)) == count and size == 4 * count)
        for count, pieces, size in sampled
    )
    # 2 eval episodes before, 2 after, 2 steps x 2 tasks x 2 members
    assert counts["episodes"] == 2 + 2 + 8
    assert counts["turns"] >= counts["episodes"]
    assert counts["metrics"] > 0
    assert (tmp_path / "runs" / "smoke" / "final" / "config.json").is_file()


@pytest.mark.docker
@pytest.mark.slow
def test_train_on_two_fsdp2_ranks_with_a_kl_reference(repo_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    result = run_cli(
        [
            "train",
            "--task",
            "calc",
            "name=fsdp",
            f"runs_dir={tmp_path / 'runs'}",
            f"store.url=sqlite:///{db}",
            "trainer.nproc=2",
            "loss.kl_coef=0.01",
            "train.steps=1",
            "train.tasks_per_step=1",
            "train.group_size=2",
            "eval.before=false",
            "eval.after=false",
            "sampling.max_new_tokens=32",
            "rollout.max_turns=1",
        ],
        repo_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (tmp_path / "runs" / "fsdp" / "metrics.jsonl").read_text().splitlines()
    step = [json.loads(line) for line in lines][-1]
    # with a KL term every episode is trained on, so the update ran and its weights were gathered
    assert step["step"] == 1 and "kl" in step and step["sync_s"] > 0 and step["trained_episodes"] == 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("select status from runs").fetchone()[0] == "finished"
