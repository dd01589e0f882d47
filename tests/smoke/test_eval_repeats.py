"""`agentrl eval` twice on the same weights gives the identical per-task outcomes and sampled tokens (calc
and maze, 16 held-out tasks each): held-out requests carry per-request seeds and the cached engine decodes
them batch-invariantly (`engine.cached.deterministic`, on by default), so which episodes happen to be
decoded together, which depends on when each env answers, no longer changes a single token.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_cli import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def evaluate(
    repo_root: Path, tmp_path: Path, task: str, name: str
) -> dict[str, tuple[int, float, list[str]]]:
    """Task id -> (success, reward, the text of each turn) over the held-out episodes of one eval run."""
    db = tmp_path / f"{name}.db"
    result = run_cli(
        [
            "eval",
            "--task",
            task,
            f"name={name}",
            f"runs_dir={tmp_path / 'runs'}",
            f"store.url=sqlite:///{db}",
            "eval.num_tasks=16",
            "eval.temperature=0.7",
            "sampling.max_new_tokens=32",
            "rollout.max_turns=2",
        ],
        repo_root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes: dict[str, tuple[int, float, list[str]]] = {}
    with sqlite3.connect(db) as conn:
        for task_id, success, reward in conn.execute("select task_id, success, reward from episodes"):
            outcomes[str(task_id)] = (int(success), float(reward), [])
        turns = conn.execute(
            "select e.task_id, t.text from turns t join episodes e on t.episode_id = e.id order by t.'index'"
        )
        for task_id, text in turns:
            outcomes[str(task_id)][2].append(str(text))
    return outcomes


@pytest.mark.parametrize("task", ["calc", "maze"])
def test_two_evaluations_of_the_same_weights_agree_task_by_task(
    repo_root: Path, tmp_path: Path, task: str
) -> None:
    first = evaluate(repo_root, tmp_path, task, "first")
    second = evaluate(repo_root, tmp_path, task, "second")
    assert len(first) == 16
    assert first == second
