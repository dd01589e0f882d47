"""The task_draws table: migration 0003 through `agentrl db upgrade`, the round trip through the store writer,
and the adaptive posterior rebuilt from the rows a resumed run keeps."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.errors import StoreError
from agentrl.store.repository import (
    close_store,
    create_run,
    load_task_draws,
    open_store,
    record_task_draws,
    resume_run,
)
from agentrl.store.writer import StoreWriter
from agentrl.tasks import Task
from agentrl.trainer.task_sampling import collect, sampler_for_run
from agentrl.types import Action, Episode, Turn

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


def draw(step: int, task_id: str, reason: str, successes: int, failures: int) -> dict[str, object]:
    return {
        "step": step,
        "round": 0,
        "task_id": task_id,
        "group_id": f"{task_id}-g",
        "reason": reason,
        "successes": successes,
        "failures": failures,
        "success_rate": successes / (successes + failures),
        "alpha": 1.0 + successes,
        "beta": 1.0 + failures,
        "score": 0.2,
    }


def test_db_upgrade_creates_the_task_draws_table(tmp_path: Path, repo_root: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    upgraded = subprocess.run(
        AGENTRL + ["db", "upgrade", "--url", url], capture_output=True, text=True, timeout=120, env=env
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert "(head: 0011)" in upgraded.stdout  # 0003 made task_draws; later revisions keep it
    with sqlite3.connect(tmp_path / "store.db") as conn:
        columns = [row[1] for row in conn.execute("pragma table_info(task_draws)")]
        indexes = [row[1] for row in conn.execute("pragma index_list(task_draws)")]
    assert columns[:7] == ["id", "run_id", "step", "round", "task_id", "group_id", "reason"]
    assert {"successes", "failures", "success_rate", "alpha", "beta", "score"} <= set(columns)
    assert "ix_task_draws_run_step" in indexes


def test_task_draws_round_trip_and_resume_drops_later_steps(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    run_id = create_run(store, "draws", "calc", {})
    with StoreWriter(store) as writer:
        writer.record_task_draws(run_id, [draw(1, "a", "posterior", 1, 1), draw(1, "b", "explore", 0, 2)])
        writer.record_task_draws(run_id, [draw(2, "a", "posterior", 2, 0)])
        writer.record_task_draws(run_id, [])
    rows = load_task_draws(store, run_id)
    assert [(r["step"], r["task_id"], r["reason"]) for r in rows] == [
        (1, "a", "posterior"),
        (1, "b", "explore"),
        (2, "a", "posterior"),
    ]
    assert rows[0] == draw(1, "a", "posterior", 1, 1)
    assert len(load_task_draws(store, run_id, up_to_step=1)) == 2
    resume_run(store, run_id, after_step=1)
    assert [r["step"] for r in load_task_draws(store, run_id)] == [1, 1]
    with pytest.raises(StoreError, match="lacks \\['score'\\]"):
        record_task_draws(store, run_id, [{k: v for k, v in draw(3, "c", "x", 0, 1).items() if k != "score"}])
    close_store(store)


def scripted(task_id: str, group: str, success: bool) -> Episode:
    turn = Turn(0, (1,), (2,), (-0.1,), "", Action(""), "", float(success), False, None)
    return Episode(
        f"{group}-{success}", "test/Env-v0", task_id, group, 0, (turn,), "terminated", None, success
    )


def test_a_resumed_adaptive_sampler_draws_what_the_uninterrupted_one_draws(tmp_path: Path) -> None:
    tasks: list[Task] = [{"id": f"t{i}"} for i in range(12)]
    config = load_config(
        "calc", ["tasks.sampler=adaptive", "train.tasks_per_step=3", "train.group_size=2", "train.seed=4"]
    )

    async def play(chosen: Sequence[Task], seed: int) -> list[Episode]:
        # task i succeeds in member 0 only when i is odd: odd tasks teach, even ones never succeed
        return [
            scripted(str(t["id"]), f"{t['id']}-{seed}", int(str(t["id"])[1:]) % 2 == 1 and m == 0)
            for t in chosen
            for m in range(2)
        ]

    straight = sampler_for_run(config, tasks)
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    run_id = create_run(store, "resume", "calc", {})
    steps = {step: asyncio.run(collect(straight, step, play)).draws for step in (1, 2, 3)}
    for step in (1, 2, 3):
        record_task_draws(store, run_id, steps[step])
    resume_run(store, run_id, after_step=2)  # as if killed after the step-2 checkpoint
    resumed = sampler_for_run(config, tasks, load_task_draws(store, run_id))
    again = asyncio.run(collect(resumed, 3, play)).draws
    assert [(d["task_id"], d["reason"], d["alpha"], d["beta"]) for d in again] == [
        (d["task_id"], d["reason"], d["alpha"], d["beta"]) for d in steps[3]
    ]
    assert resumed.counts == straight.counts
    assert any(d["alpha"] != 1.0 or d["beta"] != 1.0 for d in steps[3])  # step 3 did use the posterior
    close_store(store)
