"""Smoke tests: `agentrl train --task calc` with the filtered and adaptive task samplers (a real sandbox and
store): the sampler metrics per step, the task_draws rows, dropped groups stored untrained;
and `bench/task_samplers.py --quick`. The two training tests use the tiny random model (the `tiny_model`
fixture): they test the samplers' draws and bookkeeping, which do not depend on the model's size (SmolLM2 made
them take 97 s of a 2-core CPU without native bf16); the quick benchmark still plays SmolLM2."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]
DROPPED = ("filtered_out", "surplus")


def train(
    repo_root: Path, tmp_path: Path, model: Path, sampler: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = [
        "train",
        "--task",
        "calc",
        f"name={sampler}",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        f"tasks.sampler={sampler}",
        f"model.name={model}",
        "rollout.max_context_tokens=4096",  # one byte per token
        "train.steps=2",
        "train.tasks_per_step=2",
        "train.group_size=2",
        "eval.before=false",
        "eval.after=false",
        "sampling.max_new_tokens=32",
        "rollout.max_turns=2",
        *extra,
    ]
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    return subprocess.run(AGENTRL + args, cwd=repo_root, capture_output=True, text=True, timeout=900, env=env)


def step_rows(tmp_path: Path, name: str) -> list[dict[str, float]]:
    lines = (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "rollout_s" in row]


def draws_and_episodes(db: Path) -> tuple[list[tuple[object, ...]], dict[str, tuple[int, int]]]:
    """task_draws rows (step, round, task_id, group_id, reason, alpha, beta), and per group id: (episodes,
    episodes with at least one advantage stored)."""
    with sqlite3.connect(db) as conn:
        draws = conn.execute(
            "select step, round, task_id, group_id, reason, alpha, beta from task_draws order by id"
        ).fetchall()
        groups = conn.execute(
            "select e.group_id, count(distinct e.id), count(distinct case when t.advantage is not null "
            "then e.id end) from episodes e left join turns t on t.episode_id = e.id "
            "where e.split = 'train' group by e.group_id"
        ).fetchall()
    return draws, {group: (total, credited) for group, total, credited in groups}


@pytest.mark.docker
@pytest.mark.slow
def test_filtered_sampler_trains_on_kept_groups_stores_the_rest(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    result = train(repo_root, tmp_path, tiny_model, "filtered", "tasks.filter.budget=1.0")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = step_rows(tmp_path, "filtered")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert 0.0 <= row["zero_variance_groups"] <= 1.0
        assert row["played_groups"] == 2 + row["extra_groups_played"] <= 2 + 2  # budget 1.0 x 2 tasks
        assert row["episodes"] == 2 * row["played_groups"]
        assert row["informative_episodes"] <= 4
    draws, groups = draws_and_episodes(tmp_path / "store.db")
    assert len(draws) == sum(row["played_groups"] for row in rows)
    assert {reason for *_, reason, _, _ in draws} <= {"informative", "filtered_out", "filler", "surplus"}
    for step in (1, 2):
        kept = [d for d in draws if d[0] == step and d[4] not in DROPPED]
        assert len(kept) == 2  # a step always trains on tasks_per_step groups
    for _, _, _, group_id, reason, _, _ in draws:
        total, credited = groups[str(group_id)]
        assert total == 2  # every played episode is stored, dropped groups too
        if reason in DROPPED:
            assert credited == 0  # stored without advantages: never trained on


@pytest.mark.docker
@pytest.mark.slow
def test_adaptive_sampler_records_its_posterior(repo_root: Path, tmp_path: Path, tiny_model: Path) -> None:
    result = train(repo_root, tmp_path, tiny_model, "adaptive", "tasks.adaptive.exploration=0.5")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = step_rows(tmp_path, "adaptive")
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["posterior_mean_signal"] == pytest.approx(1 / 6, abs=1e-6)  # nothing seen: the prior
    assert all("zero_variance_groups" in row and "informative_episodes" in row for row in rows)
    draws, _ = draws_and_episodes(tmp_path / "store.db")
    assert [(d[0], d[4]) for d in draws] == [
        (1, "posterior"),
        (1, "explore"),
        (2, "posterior"),
        (2, "explore"),
    ]
    assert all(d[5] == 1.0 and d[6] == 1.0 for d in draws[:2])
    assert all(isinstance(d[5], float) and isinstance(d[6], float) and d[5] + d[6] >= 2.0 for d in draws[2:])


@pytest.mark.docker
@pytest.mark.slow
def test_the_quick_sampler_benchmark_writes_its_report(repo_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "task_samplers.json"
    result = subprocess.run(
        [sys.executable, "bench/task_samplers.py", "--quick", "--out", str(out)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "AGENTRL_DB_URL": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]["calc"]) == {"uniform", "filtered", "adaptive"}
    for summary in report["summary"]["calc"].values():
        assert 0.0 <= summary["mean_zero_variance_groups"] <= 1.0
    assert report["summary"]["calc"]["filtered"]["total_played_groups"] >= 2
