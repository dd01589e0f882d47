"""MazeEnv: walk `@` to `G` on a small text grid, one move per turn (keys and doors at level 3).

What this is: the interaction protocol of the maze suite, pure Python (no sandbox; `blocking = False`).
A turn is one move, given either as the tool call `move(direction)` or, when the turn has no tool call, as
a plain direction word in the text ("up", "down", "left", "right"; the first one found). `text_moves=False`
turns that fallback off, so only a well-formed tool call moves: measured in the credit study
(docs/credit_study.md), a policy that lost its tool calls learned to copy the invalid-turn note, whose first
direction word the fallback read as a move. `coordinates=True` adds a line naming the `@` and `G` cells
above each board: SmolLM2-135M-Instruct's first moves on the plain board were no better than a uniformly
random mover's (docs/credit_study.md). Reaching the goal
ends the episode with reward 1.0; otherwise every step gives 0 and the episode is truncated after
`max_steps` moves. Bumping into a wall or a locked door is a valid move that leaves the state as it was.
A turn with no usable move gets an error observation naming the format, reward 0 and
`info["invalid"] = True` (the trainer's credit step applies the invalid-action penalty).

Fork: "copy" (`Env.fork` deep-copies the board, position, key and step count).

State key: `text_state_key` of the task id and the rendered board (agent cell and whether the key is still
on the floor): the canonical board state, not the history, so the same cell reached by different paths is
the same state. Observations are the board plus, at level 3, a short line when the key is taken or the door
is locked; a wall bump shows the unchanged board, with no event line: a line like "Blocked by a wall." made
SmolLM2-135M-Instruct sometimes call a tool named "blocked".

What this is not: a layout generator (`agentrl_maze.levels`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentrl.env import Env, StepResult, text_state_key, tool_spec
from agentrl.errors import EnvError
from agentrl.types import Action
from agentrl_maze.levels import (
    DIRECTIONS,
    LEVEL_SPECS,
    Board,
    State,
    initial_state,
    make_task,
    move,
    parse_layout,
    render,
)
from agentrl_maze.scripted import scripted_policy

ENV_ID = "agentrl/Maze-v0"
DEFAULT_MAX_STEPS = 12
MOVE_TOOL = tool_spec(
    "move",
    "Move one cell on the board",
    {"direction": {"type": "string", "enum": list(DIRECTIONS), "description": "up, down, left or right"}},
)
LEGEND = "Move @ to G. # is a wall."
DOOR_LEGEND = " Step on k to take the key; D opens only with it."
EVENTS = {
    "moved": "",
    "wall": "",
    "locked": "The door D is locked; take the key k first.",
    "key": "You took the key.",
    "goal": "You reached G!",
}
# Short on purpose: longer prose errors (the parse problem plus a format example) made SmolLM2-135M answer
# with prose about "the error message"; the detailed problem goes to info["error"] instead.
INVALID_NOTE = "Invalid. Call move with direction up, down, left or right."
_WORD = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)


def state_key(task_id: str, board_text: str) -> str:
    return text_state_key(f"{task_id}\0{board_text.replace(chr(10), '/')}")


def board_view(board: Board, state: State, coordinates: bool = False) -> str:
    """The rendered board, after a line naming the `@` and `G` cells when `coordinates` is on."""
    if not coordinates:
        return render(board, state)
    (row, column), (goal_row, goal_column) = state.position, board.goal
    agent = f"@ is at row {row + 1}, column {column + 1}"
    where = f"{agent}; G is at row {goal_row + 1}, column {goal_column + 1}."
    return f"{where}\n{render(board, state)}"


def first_observation(board: Board, state: State, coordinates: bool = False) -> str:
    legend = LEGEND + (DOOR_LEGEND if board.key is not None else "")
    return f"{legend}\n{board_view(board, state, coordinates)}"


def step_observation(board: Board, state: State, event: str, coordinates: bool = False) -> str:
    line, view = EVENTS[event], board_view(board, state, coordinates)
    return f"{line}\n{view}" if line else view


def parse_direction(action: Action, *, text_moves: bool = True) -> tuple[str | None, str]:
    """The move of a turn and, when there is none, the reason (for the error observation). `text_moves`:
    a turn without a tool call may name its move as a plain direction word."""
    if action.tool_calls:
        call = action.tool_calls[0]
        if call.name != "move":
            return None, f"unknown tool {call.name!r}; the only tool is move"
        value = call.arguments.get("direction") if set(call.arguments) == {"direction"} else None
        if not isinstance(value, str) or value.strip().lower() not in DIRECTIONS:
            return (
                None,
                f"move takes one argument, direction (up/down/left/right); got {dict(call.arguments)}",
            )
        return value.strip().lower(), ""
    if action.parse_error:
        return None, action.parse_error
    if not text_moves:
        return None, "your turn has no tool call; call move(direction)"
    found = _WORD.search(action.text)
    return (found.group(1).lower(), "") if found else (None, "your turn has no move")


def validate_task(task: Any) -> dict[str, Any]:
    """The task record, checked; `EnvError` says which field is wrong."""
    if not isinstance(task, Mapping):
        raise EnvError(f"options['task'] must be a task record (a dict), got {type(task).__name__}")
    if not isinstance(task.get("id"), str) or not task["id"]:
        raise EnvError("maze task is missing 'id' (a non-empty string); see tasks/maze/*/*.jsonl")
    if not isinstance(task.get("layout"), list):
        raise EnvError(f"maze task {task['id']!r} is missing 'layout' (a list of row strings)")
    parse_layout(task["layout"])
    return dict(task)


EXAMPLE_EPISODES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("@#.", "..G", "..."), ("down", "right", "right")),
    (("..#.", "G.#@", "...."), ("down", "left", "left", "up", "left")),
)


def example_exchange(
    layout: tuple[str, ...], moves: tuple[str, ...], coordinates: bool = False
) -> list[dict[str, Any]]:
    """One played episode as chat messages: first observation, then a move call and its observation each."""
    board = parse_layout(layout)
    state = initial_state(board)
    first = first_observation(board, state, coordinates)
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for direction in moves:
        state, event = move(board, state, direction)
        call = {"name": "move", "arguments": {"direction": direction}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "content": step_observation(board, state, event, coordinates)})
    return messages


def few_shot_examples(coordinates: bool = False) -> tuple[dict[str, Any], ...]:
    """Two solved episodes on 3-row boards (smaller than any level's, so in no split), using all four
    directions, rendered as the env renders its boards. The last message is the assistant's winning move,
    as in the calc examples.
    """
    messages = [
        message
        for layout, moves in EXAMPLE_EPISODES
        for message in example_exchange(layout, moves, coordinates)
    ]
    return tuple(messages[:-1])


class MazeEnv(Env):
    """A text grid maze; see the module docstring."""

    tools = (MOVE_TOOL,)
    examples = few_shot_examples()
    blocking = False
    fork_capability = "copy"
    scripted_policy = staticmethod(scripted_policy)  # demonstrations (agentrl demos)

    def __init__(
        self,
        max_steps: int = DEFAULT_MAX_STEPS,
        level: int = 1,
        text_moves: bool = True,
        coordinates: bool = False,
    ) -> None:
        """max_steps: moves before truncation. level: the level drawn by reset() when no task is given.
        text_moves: whether a turn without a tool call may move by a plain direction word in its text.
        coordinates: whether each board comes after a line with the `@` and `G` cells (row and column)."""
        super().__init__()
        if max_steps < 1:
            raise EnvError(f"max_steps must be >= 1, got {max_steps}")
        if level not in LEVEL_SPECS:
            raise EnvError(f"level must be one of {sorted(LEVEL_SPECS)}, got {level}")
        self.max_steps = max_steps
        self.level = level
        self.text_moves = bool(text_moves)
        self.coordinates = bool(coordinates)
        if self.coordinates:  # the few-shot boards as this env renders them
            self.examples = few_shot_examples(coordinates=True)
        self._task: dict[str, Any] | None = None
        self._board: Board | None = None
        self._state: State | None = None
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a layout drawn from `seed` when none is given."""
        super().reset(seed=seed)
        task = (options or {}).get("task")
        self._task = validate_task(task) if task is not None else self._draw_task()
        self._board = parse_layout(self._task["layout"])
        self._state = initial_state(self._board)
        self._steps = 0
        board_text = render(self._board, self._state)
        return first_observation(self._board, self._state, self.coordinates), {
            "state_key": state_key(self._task["id"], board_text),
            "task_id": self._task["id"],
        }

    def step(self, action: Action) -> StepResult:
        task, board, state = self._task, self._board, self._state
        assert task is not None and board is not None and state is not None  # Env's guard: reset() ran
        self._steps += 1
        direction, problem = parse_direction(action, text_moves=self.text_moves)
        if direction is None:
            observation = f"{INVALID_NOTE}\n{board_view(board, state, self.coordinates)}"
            info: dict[str, Any] = {"invalid": True, "event": "invalid", "error": problem}
            reward, terminated = 0.0, False
        else:
            state, event = move(board, state, direction)
            self._state = state
            observation = step_observation(board, state, event, self.coordinates)
            info = {"invalid": False, "event": event, "direction": direction}
            terminated = event == "goal"
            reward = 1.0 if terminated else 0.0
        truncated = not terminated and self._steps >= self.max_steps
        info.update(
            state_key=state_key(task["id"], render(board, state)),
            task_id=task["id"],
            success=terminated,
            steps=self._steps,
        )
        return StepResult(observation, reward, terminated, truncated, info)

    def _draw_task(self) -> dict[str, Any]:
        """A train layout of `self.level` drawn from the env's seeded generator."""
        seed = int(self.np_random.integers(2**31))
        for index in range(1000):
            task = make_task(seed, self.level, index)
            if task is not None and task["split"] == "train":
                return task
        raise EnvError(f"no level-{self.level} layout found for seed {seed}; this is a generator bug")
