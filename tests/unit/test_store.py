"""The run store round trip on a temporary SQLite file, and the background writer."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from agentrl.errors import StoreError
from agentrl.store.repository import (
    close_store,
    count_rows,
    create_run,
    finish_run,
    list_runs,
    load_episodes,
    load_metrics,
    open_store,
    record_episodes,
    record_metrics,
)
from agentrl.store.writer import StoreWriter
from agentrl.types import Action, Episode, ToolCall, Turn


def make_episode(name: str, rewards: list[float]) -> Episode:
    turns = tuple(
        Turn(
            index=t,
            prompt_ids=(1, 2, 3),
            completion_ids=(4, 5),
            completion_logprobs=(-0.1, -0.2),
            text=f"turn {t}",
            action=Action(f"turn {t}", (ToolCall("python", {"code": "1"}),)),
            observation=f"obs {t}",
            reward=reward,
            invalid=t == 1,
            state_key=f"s{t + 1}",
        )
        for t, reward in enumerate(rewards)
    )
    return Episode(name, "math/Calc-v0", "task-1", "group-1", 7, turns, "terminated", "s0", success=True)


def test_round_trip(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/nested/runs.db")
    assert (tmp_path / "nested" / "runs.db").is_file()
    run_id = create_run(store, "demo", "math", {"train": {"steps": 2}})
    episodes = [make_episode("e0", [0.0, 1.0]), make_episode("e1", [0.5])]
    record_episodes(store, run_id, 3, "train", episodes, [[0.25, -0.5], [1.5]])
    record_episodes(store, run_id, 3, "eval", [make_episode("e2", [0.0])], None)
    record_metrics(store, run_id, 3, {"reward_mean": 0.75, "broken": math.nan})
    finish_run(store, run_id, "finished")

    [run] = list_runs(store)
    assert (run["id"], run["name"], run["status"], run["config"]) == (
        run_id,
        "demo",
        "finished",
        {"train": {"steps": 2}},
    )
    assert run["finished_at"] is not None
    loaded = load_episodes(store, run_id)
    assert [e["uid"] for e in loaded] == ["e0", "e1", "e2"]
    first = loaded[0]
    assert (first["step"], first["split"], first["reward"], first["num_turns"], first["seed"]) == (
        3,
        "train",
        1.0,
        2,
        7,
    )
    assert [turn["advantage"] for turn in first["turns"]] == [0.25, -0.5]
    assert first["turns"][1] == {
        "index": 1,
        "text": "turn 1",
        "observation": "obs 1",
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "reward": 1.0,
        "advantage": -0.5,
        "state_key": "s2",
        "invalid": True,
        "tool_name": "python",
        "info": {},
        "finish_reason": None,  # this hand-made Turn has none (the runner's carry the engine's)
        "segment": 0,
        "prompt_view": None,  # a `full` context: no view
    }
    assert (first["initial_state_key"], first["attempts"], first["first_observation"]) == ("s0", 1, None)
    assert loaded[2]["split"] == "eval" and loaded[2]["turns"][0]["advantage"] is None
    assert load_metrics(store, run_id) == [
        {"step": 3, "name": "reward_mean", "value": 0.75},
        {"step": 3, "name": "broken", "value": None},
    ]
    assert count_rows(store) == {"runs": 1, "episodes": 3, "turns": 4, "metrics": 2}
    close_store(store)


def test_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_DB_URL", f"sqlite:///{tmp_path}/env.db")
    store = open_store(None)
    create_run(store, "r", "t", {})
    assert (tmp_path / "env.db").is_file()
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    close_store(store)


def test_mismatched_advantages_write_nothing(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "r", "t", {})
    with pytest.raises(StoreError, match="advantages"):
        record_episodes(
            store,
            run_id,
            0,
            "train",
            [make_episode("e0", [0.0]), make_episode("e1", [1.0, 2.0])],
            [[0.0], [1.0]],
        )
    assert count_rows(store)["episodes"] == 0
    with pytest.raises(StoreError, match="no run"):
        finish_run(store, "missing", "finished")


def test_unopenable_store_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open"):
        open_store(f"sqlite:///{blocker}/runs.db")


def test_writer_flushes_on_close(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "r", "t", {})
    with StoreWriter(store) as writer:
        for step in range(20):
            writer.record_episodes(
                run_id, step, "train", [make_episode(f"e{step}", [1.0, 0.0])], [[0.1, 0.2]]
            )
            writer.record_metrics(run_id, step, {"loss": float(step)})
    assert count_rows(store) == {"runs": 1, "episodes": 20, "turns": 40, "metrics": 20}
    close_store(store)


def test_writer_surfaces_failures(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    writer = StoreWriter(store)
    writer.record_metrics("no-such-run", 0, {"loss": 1.0})  # violates the runs foreign key
    with pytest.raises(StoreError, match="background store write failed"):
        writer.flush()
    run_id = create_run(store, "r", "t", {})
    writer.record_metrics(run_id, 0, {"loss": 1.0})
    writer.close()
    assert count_rows(store)["metrics"] == 1
    with pytest.raises(StoreError, match="closed"):
        writer.record_metrics(run_id, 1, {"loss": 1.0})
    close_store(store)


def test_tree_branches_keep_their_parent_and_branch_turn(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "tree", "maze", {})
    root = make_episode("root", [0.0, 0.0, 1.0])
    branch = replace(make_episode("branch", [0.0, 0.0, 0.0]), parent_id="root", branch_turn=1)
    record_episodes(store, run_id, 1, "train", [root, branch], None)
    loaded = {episode["uid"]: episode for episode in load_episodes(store, run_id)}
    assert (loaded["root"]["parent_uid"], loaded["root"]["branch_turn"]) == (None, None)
    assert (loaded["branch"]["parent_uid"], loaded["branch"]["branch_turn"]) == ("root", 1)
    close_store(store)


def test_turns_keep_their_token_segment_and_prompt_view(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "window", "calc-chain", {})
    played = make_episode("windowed", [0.0, 1.0, 0.0])
    view = {"policy": "window", "task_turn": 0, "shown": [], "masked": [], "state_text": "part 2 of 3"}
    turns = (played.turns[0], replace(played.turns[1], segment=1, prompt_view=view), played.turns[2])
    record_episodes(store, run_id, 1, "train", [replace(played, turns=turns)], None)
    (loaded,) = load_episodes(store, run_id)
    assert [turn["segment"] for turn in loaded["turns"]] == [0, 1, 0]
    assert [turn["prompt_view"] for turn in loaded["turns"]] == [None, view, None]
    close_store(store)


def test_migration_0010_downgrades_and_upgrades_and_old_turns_read_as_segment_0(tmp_path: Path) -> None:
    import sqlite3

    from alembic import command

    from agentrl.store.migrations import alembic_config, current, head

    database = tmp_path / "runs.db"
    store = open_store(f"sqlite:///{database}")
    run_id = create_run(store, "old", "calc", {})
    record_episodes(store, run_id, 1, "train", [make_episode("e", [0.0, 1.0])], None)
    with store.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0009")
    close_store(store)
    with sqlite3.connect(database) as conn:
        columns = [row[1] for row in conn.execute("pragma table_info(turns)")]
    assert "segment" not in columns and "prompt_view" not in columns
    store = open_store(f"sqlite:///{database}")  # upgrades to the head again: the columns come back empty
    assert current(store.engine) == head() == "0011"
    (loaded,) = load_episodes(store, run_id)
    assert [(t["segment"], t["prompt_view"]) for t in loaded["turns"]] == [(0, None), (0, None)]
    close_store(store)


def test_a_run_whose_process_died_is_marked_killed_when_runs_are_listed(tmp_path: Path) -> None:
    import subprocess
    import sys

    from agentrl.store.repository import mark_dead_runs

    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    live = create_run(store, "live", "calc", {})  # this process: alive
    gone = create_run(store, "gone", "calc", {})
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(ended.stdout)  # a process that has exited: its pid names no process now
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE runs SET pid = ? WHERE id = ?", (dead_pid, gone))
    finished = create_run(store, "done", "calc", {})
    finish_run(store, finished, "finished")
    assert mark_dead_runs(store, alive=lambda pid: pid != dead_pid) == [gone]
    statuses = {run["id"]: run["status"] for run in list_runs(store)}
    assert statuses == {live: "running", gone: "killed", finished: "finished"}
    assert mark_dead_runs(store) == []  # marked once
    close_store(store)
