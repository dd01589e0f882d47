"""`agentrl train --task maze` run in a subprocess and read back from its store, for the smoke tests that
train through the CLI; and `agentrl study` run the same way, with the overrides the studies' smoke tests
share.

This is a test helper, not a test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.store.repository import close_store, list_runs, load_episodes, load_metrics, open_store


def finished_run(url: str, name: str, step: int = 1) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The run named `name` in the store at `url`, checked finished: its episodes (`load_episodes`) and its
    metrics at `step`."""
    store = open_store(url)
    try:
        (run,) = [run for run in list_runs(store) if run["name"] == name]
        assert run["status"] == "finished"
        episodes = load_episodes(store, run["id"])
        metrics = {row["name"]: row["value"] for row in load_metrics(store, run["id"]) if row["step"] == step}
    finally:
        close_store(store)
    return episodes, metrics


def train_maze(
    repo_root: Path, tmp_path: Path, name: str, program: Sequence[str], *overrides: str
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Run `program` (argv that takes `agentrl`'s arguments, e.g. `python -m agentrl.cli.main`) as
    `train --task maze` named `name`, its run folder and a SQLite store under `tmp_path`, then
    `finished_run` of it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["train", "--task", "maze", f"name={name}", f"runs_dir={tmp_path / 'runs'}", f"store.url={url}"]
    result = subprocess.run(
        [*program, *args, *overrides],
        cwd=repo_root,
        env={**os.environ, "AGENTRL_DB_URL": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return finished_run(url, name)


TINY_MAZE_STUDY_OVERRIDES = [
    "engine.kind=cached",
    "model.dtype=float32",
    "update.autocast_bf16=false",
    "rollout.seeded_sampling=true",
    "rollout.max_context_tokens=4096",
    "sampling.max_new_tokens=12",
    "rollout.max_turns=3",
]
"""What every run of the studies' smoke tests shares: the tiny model on the maze, short turns, seeded."""


def run_study(repo_root: Path, root: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`agentrl study ARGS NAME --root ROOT` in a subprocess, with no store URL from the environment."""
    return subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "study", *args, name, "--root", str(root)],
        cwd=repo_root,
        env={**os.environ, "AGENTRL_DB_URL": ""},
        capture_output=True,
        text=True,
        timeout=900,
    )
