"""MazeEnv and its layouts: the Env contract, determinism, canonical state keys, invalid turns, BFS solves.

The last test trains (one tiny GiGPO step with the real model) and is marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentrl_maze.env import INVALID_NOTE, MazeEnv, parse_direction
from agentrl_maze.levels import (
    LEVEL_SPECS,
    LEVELS,
    initial_state,
    make_task,
    move,
    parse_layout,
    render,
    solve,
    split_of,
    write_tasks,
)

from agentrl.env import check_env, make
from agentrl.errors import EnvError, EpisodeOver
from agentrl.types import Action, ToolCall

ROOT = Path(__file__).resolve().parents[3]
TASKS = ROOT / "tasks" / "maze"
OPEN = {"id": "open", "layout": ["@...", "....", "....", "...G"]}
DOOR = {"id": "door", "layout": ["@.#.", "k.D.", "..#G"]}


def go(direction: str) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="move", arguments={"direction": direction}),))


def load(level: int, split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TASKS / f"level{level}" / f"{split}.jsonl").open()]


def play(env: MazeEnv, task: dict[str, Any], moves: list[str]) -> list[Any]:
    env.reset(options={"task": task})
    return [env.step(go(direction)) for direction in moves]


def test_check_env_passes_with_and_without_a_task() -> None:
    check_env(MazeEnv(), options={"task": OPEN})
    check_env(MazeEnv(level=3))


def test_registered_id_makes_a_maze_env() -> None:
    made = make("agentrl/Maze-v0", max_steps=20, level=2)
    assert isinstance(made, MazeEnv) and made.max_steps == 20 and made.level == 2


def test_reset_is_deterministic_by_seed() -> None:
    first, second = MazeEnv(level=2), MazeEnv(level=2)
    assert first.reset(seed=7) == second.reset(seed=7)
    assert first.reset(seed=7)[0] != first.reset(seed=8)[0]


def test_generation_is_deterministic_and_matches_the_committed_tasks(tmp_path: Path) -> None:
    for level in LEVELS:
        committed = json.loads((TASKS / f"level{level}" / "manifest.json").read_text())
        manifest = write_tasks(
            tmp_path / str(level), committed["seed"], {level: {"train": 300, "heldout": 60}}
        )
        assert manifest["sha256"] == committed["sha256"]


def test_splits_are_disjoint_and_tagged() -> None:
    for level in LEVELS:
        train, heldout = load(level, "train"), load(level, "heldout")
        assert {t["id"] for t in train}.isdisjoint({t["id"] for t in heldout})
        assert all(split_of(t["layout"]) == "heldout" for t in heldout)
        assert all(t["level"] == level for t in train + heldout)


def test_same_board_by_different_paths_has_the_same_state_key() -> None:
    env = MazeEnv(max_steps=30)
    right_down = play(env, OPEN, ["right", "down"])[-1]
    down_right = play(env, OPEN, ["down", "right"])[-1]
    detour = play(env, OPEN, ["right", "right", "down", "left"])[-1]
    assert right_down.info["state_key"] == down_right.info["state_key"] == detour.info["state_key"]
    assert right_down.observation == down_right.observation
    elsewhere = play(env, OPEN, ["right", "right"])[-1]
    assert elsewhere.info["state_key"] != right_down.info["state_key"]


def test_the_key_is_part_of_the_state() -> None:
    env = MazeEnv(max_steps=30)
    on_key = play(env, DOOR, ["down"])[-1]  # onto the key: now holding it
    back_again = play(env, DOOR, ["down", "up", "down"])[-1]
    assert on_key.info["event"] == "key" and back_again.info["state_key"] == on_key.info["state_key"]
    start_with_key = play(env, DOOR, ["down", "up"])[-1]
    _, fresh = env.reset(options={"task": DOOR})
    assert start_with_key.info["state_key"] != fresh["state_key"]  # same cell, key taken


def test_a_locked_door_blocks_until_the_key_is_taken() -> None:
    env = MazeEnv(max_steps=30)
    through = play(env, DOOR, ["down", "right", "right"])  # takes the key first, then through the door
    assert [r.info["event"] for r in through] == ["key", "moved", "moved"]
    blocked = play(env, DOOR, ["right", "down", "right"])[-1]
    assert blocked.info["event"] == "locked" and "locked" in blocked.observation


def test_reaching_the_goal_ends_with_reward_one() -> None:
    results = play(MazeEnv(), OPEN, ["right"] * 3 + ["down"] * 3)
    assert [r.reward for r in results] == [0.0] * 5 + [1.0]
    assert results[-1].terminated and results[-1].info["success"]


def test_walls_and_edges_leave_the_state_unchanged() -> None:
    results = play(MazeEnv(), OPEN, ["up", "left"])
    assert all(r.info["event"] == "wall" and not r.info["invalid"] for r in results)
    assert results[-1].observation == render(
        parse_layout(OPEN["layout"]), initial_state(parse_layout(OPEN["layout"]))
    )


def test_invalid_turns_are_flagged_with_an_error_observation() -> None:
    env = MazeEnv()
    env.reset(options={"task": OPEN})
    turns = [
        Action(text="I am thinking"),
        Action(text="", tool_calls=(ToolCall(name="jump", arguments={}),)),
        Action(text="", tool_calls=(ToolCall(name="move", arguments={"direction": "north"}),)),
        Action(text="<tool_call>{bad", parse_error="unterminated <tool_call>"),
    ]
    for action in turns:
        result = env.step(action)
        assert result.info["invalid"] and result.reward == 0.0 and not result.terminated
        assert result.observation.startswith(INVALID_NOTE) and result.info["error"]
        assert result.info["state_key"] == env.reset(options={"task": OPEN})[1]["state_key"]


def test_plain_direction_words_are_moves() -> None:
    assert parse_direction(Action(text="I will go Down now")) == ("down", "")
    assert parse_direction(go("LEFT ")) == ("left", "")


def test_without_text_moves_only_a_tool_call_moves() -> None:
    """`text_moves=False`: a copy of the invalid-turn note is not a move, a tool call still is."""
    assert parse_direction(Action(text=INVALID_NOTE), text_moves=False)[0] is None
    env = MazeEnv(text_moves=False)
    start_key = env.reset(options={"task": OPEN})[1]["state_key"]
    parroted = env.step(Action(text=INVALID_NOTE))
    assert parroted.info["invalid"] and "no tool call" in parroted.info["error"]
    assert parroted.info["state_key"] == start_key
    moved = env.step(go("down"))
    assert not moved.info["invalid"] and moved.info["state_key"] != start_key


def test_coordinates_name_the_agent_and_goal_cells_above_every_board() -> None:
    env = MazeEnv(coordinates=True)
    first, info = env.reset(options={"task": OPEN})
    assert first.splitlines()[1] == "@ is at row 1, column 1; G is at row 4, column 4."
    assert first.splitlines()[2:] == OPEN["layout"]
    assert info["state_key"] == MazeEnv().reset(options={"task": OPEN})[1]["state_key"]
    moved = env.step(go("right"))
    assert moved.observation.splitlines()[0] == "@ is at row 1, column 2; G is at row 4, column 4."
    bumped = env.step(Action(text="no call"))
    assert bumped.observation.splitlines()[1].startswith("@ is at row 1, column 2;")
    shown = [m["content"] for m in env.examples if m["role"] != "assistant"]
    assert all("@ is at row" in content for content in shown) and MazeEnv().examples != env.examples


def test_episodes_are_truncated_after_max_steps() -> None:
    env = MazeEnv(max_steps=3)
    results = play(env, OPEN, ["up", "up", "up"])
    assert results[-1].truncated and not results[-1].terminated
    with pytest.raises(EpisodeOver, match="episode is over"):
        env.step(go("up"))
    with pytest.raises(EnvError, match="before reset"):
        MazeEnv().step(go("up"))


def test_bad_tasks_and_arguments_get_clear_errors() -> None:
    with pytest.raises(EnvError, match="same non-zero length"):
        MazeEnv().reset(options={"task": {"id": "x", "layout": ["@.", "G"]}})
    with pytest.raises(EnvError, match="exactly one '@'"):
        MazeEnv().reset(options={"task": {"id": "x", "layout": ["..", ".G"]}})
    with pytest.raises(EnvError, match="max_steps"):
        MazeEnv(max_steps=0)


@pytest.mark.parametrize("level", LEVELS)
def test_bfs_solves_every_heldout_level_within_its_band(level: int) -> None:
    """A scripted optimal policy (the BFS path) reaches the goal in exactly `optimal_moves` steps."""
    spec = LEVEL_SPECS[level]
    env = MazeEnv(max_steps=spec.max_moves)
    for task in load(level, "heldout"):
        path = solve(parse_layout(task["layout"]))
        assert path is not None and spec.min_moves <= len(path) == task["optimal_moves"] <= spec.max_moves
        results = play(env, task, path)
        assert results[-1].terminated and results[-1].reward == 1.0
        assert sum(r.reward for r in results) == 1.0


def test_level_three_needs_the_key() -> None:
    task = next(t for i in range(50) if (t := make_task(0, 3, i)) is not None)
    board = parse_layout(task["layout"])
    path = solve(board)
    assert path is not None
    state = initial_state(board)
    events = []
    for direction in path:
        state, event = move(board, state, direction)
        events.append(event)
    assert events.index("key") < len(events) - 1 and events[-1] == "goal"


@pytest.mark.slow
def test_one_gigpo_training_step_runs(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "agentrl.cli.main", "train", "--task", "maze",
        "credit.estimator=gigpo", "train.steps=1", "train.tasks_per_step=2", "train.group_size=2",
        "env.kwargs.max_steps=3", "rollout.max_turns=3", "eval.before=false", "eval.num_tasks=1",
        f"runs_dir={tmp_path}", f"store.url=sqlite:///{tmp_path}/store.db",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in next(tmp_path.glob("maze-train-*/metrics.jsonl")).open()]
    step = next(m for m in metrics if m["step"] == 1 and "credit/anchor_hit_rate" in m)
    assert step["episodes"] == 4.0 and 0.0 <= step["credit/anchor_hit_rate"] <= 1.0
