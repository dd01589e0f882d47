"""The scripted-policy contract: the one form of a policy that plays an env from its task record.

What this is: `ScriptedPolicy`, the optional `scripted_policy` an env class carries (as a `staticmethod`),
and the few pure helpers every player of one shares. A scripted policy is a generator function called with
the task record, the first observation and the run's `env.kwargs`; it yields one turn at a time (a
`ScriptedTurn`: the turn's exact text, or an `Action`) and is sent the observation that answers each one;
returning ends its plan. It may read the task's privileged fields (the answer, the layout): it
demonstrates, it is never evaluated. Loop over a list of planned turns rather than `yield from` it: a
list's iterator cannot be sent the observations.

Who plays one: `agentrl demos --policy scripted` (demonstrations for `agentrl sft`), `agentrl envs check
--policy scripted|MODULE:FUNCTION` (`agentrl.devtools.service_check`), and the tests of every plugin
`agentrl envs new` writes. Each drives it through `ScriptedTurns`, so a policy that works in one works in
all. `transcript_policy` adapts the older `solve(task, transcript) -> text` form to this one.

Why it lives in the Env API: it is part of what an env class may define, like its `tools` and `examples`;
it needs nothing above `agentrl.env` (no service, no client, no model).

What this is not: a player. Opening sessions, parsing turns and judging episodes belong to the callers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator

from agentrl.env.registration import load_plugins
from agentrl.env.toolcall import render_tool_call
from agentrl.errors import EnvNotFound
from agentrl.types import Action

ScriptedTurn = str | Action
"""One assistant turn of a scripted policy: its exact text, or an `Action` whose text and tool calls are
written as the runner's prompts write them (`turn_text`)."""

ScriptedPolicy = Callable[[Mapping[str, Any], str, Mapping[str, Any]], Generator[ScriptedTurn, str, None]]
"""`scripted_policy(task, first_observation, env_kwargs)`: yields each turn, is sent each observation."""

TranscriptPolicy = Callable[[Mapping[str, Any], Sequence[str]], str]
"""The older form: `solve(task, transcript) -> text`, called afresh each turn with the first observation,
then each turn and the observation that answered it (`transcript_policy` adapts it)."""


def turn_text(turn: ScriptedTurn) -> str:
    """The text of a policy's turn: a string as is; an Action's text, then each tool call in the Hermes
    layout the runner's prompts use for few-shot calls (`render_tool_call(..., multiline=True)`)."""
    if isinstance(turn, str):
        return turn
    calls = (render_tool_call(call.name, call.arguments, multiline=True) for call in turn.tool_calls)
    return "\n".join([turn.text, *calls]).strip()


class ScriptedTurns:
    """One episode of a scripted policy, turn by turn: `next_turn(observation)` is the text of the turn that
    answers `observation` (the first observation, on the first call), or None once the policy's plan ended.
    The policy is called lazily, on the first `next_turn`."""

    def __init__(self, policy: ScriptedPolicy, task: Mapping[str, Any], env_kwargs: Mapping[str, Any]):
        self._policy = policy
        self._task = task
        self._env_kwargs = env_kwargs
        self._turns: Generator[ScriptedTurn, str, None] | None = None

    def next_turn(self, observation: str) -> str | None:
        try:
            if self._turns is None:
                self._turns = self._policy(self._task, observation, self._env_kwargs)
                turn = next(self._turns)
            else:
                turn = self._turns.send(observation)
        except StopIteration:
            return None
        return turn_text(turn)


def transcript_policy(solve: TranscriptPolicy) -> ScriptedPolicy:
    """`solve(task, transcript) -> text` as a `ScriptedPolicy` that never ends its plan by itself."""

    def policy(
        task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
    ) -> Generator[ScriptedTurn, str, None]:
        transcript = [observation]
        while True:
            text = solve(task, transcript)
            answer = yield text
            transcript += [text, answer]

    return policy


def scripted_policy_of(env_id: str) -> ScriptedPolicy | None:
    """The `scripted_policy` of the env class registered as `env_id` (importing the installed plugins when
    the id is unknown), or None when the class has none; `EnvNotFound` for an unknown id."""
    try:
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error:
        load_plugins()
        try:
            spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as exc:
            raise EnvNotFound(f"no environment registered as {env_id!r}; see `agentrl envs list`") from exc
    entry_point = spec.entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    return getattr(creator, "scripted_policy", None)
