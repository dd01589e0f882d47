"""The Env contract's free parts: the base class's step guards, its declared defaults, the examples check,
`render_tool_call` and where `text_state_key` lives, on the pure-Python test envs."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import gymnasium
import pytest
from fixtures_envs import GUESS_NUMBER_ID, GuessNumberEnv

from agentrl.agent.parsing import parse_turn
from agentrl.env import (
    INFO_INVALID,
    INFO_STATE_KEY,
    INFO_SUCCESS,
    Env,
    StepResult,
    check_env,
    check_examples,
    list_envs,
    register,
    render_tool_call,
    text_state_key,
)
from agentrl.env import registration as registration_module
from agentrl.errors import EnvError, EpisodeOver
from agentrl.types import Action, ToolCall


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


class _PickyResetEnv(GuessNumberEnv):
    """A subclass whose own reset fails after its parent's succeeded."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        observation, info = super().reset(seed=seed, options=options)
        if (options or {}).get("task", {}).get("target") == 13:
            raise ValueError("13 is unlucky")
        return observation, info


class _CountingEnv(GuessNumberEnv):
    """A subclass whose step calls its parent's, as wrappers-by-inheritance do."""

    steps = 0

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        return super().step(action)


class _StepMixin:
    """A `step` that comes from outside the Env hierarchy."""

    def step(self, action: Action) -> StepResult:
        return StepResult("mixed in", 0.0, True, False, {"state_key": None})


class _MixedEnv(_StepMixin, GuessNumberEnv):
    pass


class _BareEnv(Env):
    """The least an env can be: no tools, no examples, one step that ends the episode."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        return "go", {"state_key": 0}

    def step(self, action: Action) -> StepResult:
        return StepResult("done", 0.0, True, False, {"state_key": 1})


def test_step_before_reset_raises_an_env_error_that_says_what_to_do() -> None:
    with pytest.raises(EnvError, match=r"GuessNumberEnv\.step\(\) was called before reset\(\); call reset"):
        GuessNumberEnv().step(_guess(5))


def test_step_after_the_end_raises_episode_over_until_the_next_reset() -> None:
    env = GuessNumberEnv(high=10)
    env.reset(options={"task": {"target": 7}})
    assert env.step(_guess(7)).terminated
    with pytest.raises(EpisodeOver, match="episode is over"):
        env.step(_guess(7))
    env.reset(options={"task": {"target": 7}})
    assert env.step(_guess(5)).observation == "higher"


def test_truncation_ends_the_episode_too() -> None:
    env = GuessNumberEnv(high=10, max_guesses=1)
    env.reset(options={"task": {"target": 7}})
    assert env.step(_guess(5)).truncated
    with pytest.raises(EpisodeOver):
        env.step(_guess(6))


def test_a_failed_reset_leaves_no_episode_to_step() -> None:
    env = _PickyResetEnv(high=20)
    env.reset(options={"task": {"target": 7}})
    with pytest.raises(ValueError, match="unlucky"):
        env.reset(options={"task": {"target": 13}})
    with pytest.raises(EnvError, match="before reset"):
        env.step(_guess(5))


def test_subclasses_calling_the_parents_step_are_guarded_once_and_play_normally() -> None:
    env = _CountingEnv(high=10)
    env.reset(options={"task": {"target": 3}})
    assert env.step(_guess(3)).terminated and env.steps == 1
    with pytest.raises(EpisodeOver):
        env.step(_guess(3))
    assert env.steps == 1


def test_a_step_from_a_mixin_is_guarded_too() -> None:
    env = _MixedEnv()
    with pytest.raises(EnvError, match="before reset"):
        env.step(_guess(1))
    env.reset(seed=0)
    assert env.step(_guess(1)).observation == "mixed in"
    with pytest.raises(EpisodeOver):
        env.step(_guess(1))


def test_the_guards_keep_it_a_gymnasium_env() -> None:
    env = GuessNumberEnv(high=10)
    check_env(env)
    assert isinstance(env, gymnasium.Env)
    wrapped = gymnasium.wrappers.TimeLimit(GuessNumberEnv(high=10), max_episode_steps=2)
    wrapped.reset(seed=0, options={"task": {"target": 9}})
    wrapped.step(_guess(1))
    assert wrapped.step(_guess(2))[3]  # truncated by the wrapper
    made = gymnasium.make(GUESS_NUMBER_ID, high=10)
    made.reset(seed=0, options={"task": {"target": 4}})
    assert made.step(_guess(4))[2]


def test_the_contract_is_declared_with_defaults() -> None:
    env = _BareEnv()
    assert (env.tools, env.examples, env.blocking) == ((), (), True)
    assert (INFO_SUCCESS, INFO_INVALID, INFO_STATE_KEY) == ("success", "invalid", "state_key")
    check_env(env)


@pytest.mark.parametrize(
    "examples",
    [
        "hello",
        [{"content": "no role"}],
        [{"role": "robot", "content": "x"}],
        [{"role": "user", "content": 3}],
    ],
)
def test_check_examples_rejects_what_is_not_a_chat(examples: Any) -> None:
    with pytest.raises(EnvError, match="examples"):
        check_examples(examples)


def test_render_tool_call_is_what_the_parser_reads() -> None:
    arguments = {"code": 'print("hi")\nx = {"a": [1, 2]}', "note": "café ✓"}
    for multiline in (False, True):
        text = render_tool_call("python", arguments, multiline=multiline)
        assert parse_turn(text) == Action(text, (ToolCall("python", arguments),), None)
    assert render_tool_call("submit", {"answer": "408"}) == (
        '<tool_call>{"name": "submit", "arguments": {"answer": "408"}}</tool_call>'
    )
    assert render_tool_call("submit", {}, multiline=True) == (
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    )


def test_text_state_key_lives_with_the_env_api() -> None:
    import agentrl.sandbox.state as sandbox_state

    assert text_state_key("3 passed in 0.1s") == text_state_key("3 passed  in 2.5s")
    assert not hasattr(sandbox_state, "text_state_key")


def test_an_env_registered_before_its_plugin_loads_is_still_credited_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin = importlib.metadata.EntryPoint("fixtures", "fixtures_envs", "agentrl.envs")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [plugin])
    monkeypatch.setattr(registration_module, "_loaded_plugins", set())
    register("credit/Guess-v0", entry_point="fixtures_envs:GuessNumberEnv")
    register("credit/Bare-v0", entry_point=_BareEnv)
    infos = {info.id: info for info in list_envs()}
    assert infos["credit/Guess-v0"].plugin == "fixtures"
    assert infos["credit/Bare-v0"].plugin is None
