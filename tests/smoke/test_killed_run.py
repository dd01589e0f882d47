"""A run killed by a signal is not shown live: `agentrl train` on the maze with the tiny random model, killed
with SIGKILL once its run row exists (it never gets to finish the row), then `agentrl runs ls` on the same
host marks it "killed" (the process that recorded it is gone). What it is not: a test of resuming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentrl.store.repository import close_store, list_runs, open_store

AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


def test_a_run_killed_by_a_signal_is_listed_as_killed(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {**os.environ, "AGENTRL_DB_URL": ""}
    args = [
        "train", "--task", "maze", "name=doomed", f"runs_dir={tmp_path / 'runs'}", f"store.url={url}",
        f"model.name={tiny_model}", "engine.kind=cached", "model.dtype=float32", "update.autocast_bf16=false",
        "train.steps=1000", "eval.before=false", "sampling.max_new_tokens=8",
    ]  # fmt: skip
    training = subprocess.Popen(
        AGENTRL + args, cwd=repo_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        # the run's folder is made after the store is opened (and migrated): only then read the store
        while not (tmp_path / "runs" / "doomed").is_dir() or not rows(url):
            assert training.poll() is None, training.stderr.read().decode()[-3000:] if training.stderr else ""
            assert time.monotonic() < deadline, "the run row never appeared"
            time.sleep(0.5)
        assert rows(url) == [("doomed", "running")]
    finally:
        training.send_signal(signal.SIGKILL)
        training.wait(timeout=60)
    listed = subprocess.run(
        AGENTRL + ["runs", "ls", "--db", url],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if "doomed" in line)
    assert "killed" in line.split() and rows(url) == [("doomed", "killed")]


def rows(url: str) -> list[tuple[str, str]]:
    store = open_store(url)
    try:
        return [(run["name"], run["status"]) for run in list_runs(store)]
    finally:
        close_store(store)
