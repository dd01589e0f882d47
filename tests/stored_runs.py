"""A finished `agentrl train` run read back from its store, for the smoke tests that train through the CLI.

This is a test helper, not a test module.
"""

from __future__ import annotations

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
