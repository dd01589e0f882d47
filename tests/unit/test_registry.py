"""The env registry (register, make, plugins, list_envs) and check_env, on the pure-Python test envs."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from fixtures_envs import GUESS_NUMBER_ID, GuessNumberEnv

from agentrl.env import check_env, check_tool_specs, list_envs, make, register, tool_spec
from agentrl.env import registration as registration_module
from agentrl.errors import EnvError, EnvNotFound, EnvPluginError
from agentrl.types import Action, ToolCall


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


def _use_plugins(monkeypatch: pytest.MonkeyPatch, *entry_points: importlib.metadata.EntryPoint) -> None:
    def fake_entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep for ep in entry_points if ep.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registration_module, "_loaded_plugins", set())


def test_make_returns_the_bare_env_that_plays() -> None:
    env = make(GUESS_NUMBER_ID, high=10)
    assert type(env) is GuessNumberEnv
    observation, info = env.reset(seed=0, options={"task": {"target": 7}})
    assert observation == "Guess a number between 1 and 10."
    assert env.step(_guess(5)).observation == "higher"
    result = env.step(_guess(7))
    assert (result.reward, result.terminated, result.info["state_key"]) == (1.0, True, "6-10")


def test_gymnasium_make_works_on_registered_ids() -> None:
    env = gymnasium.make(GUESS_NUMBER_ID)
    assert isinstance(env.unwrapped, GuessNumberEnv)
    assert env.reset(seed=1)[0].startswith("Guess a number")


def test_unknown_id_suggests_the_close_one() -> None:
    with pytest.raises(EnvNotFound, match="Did you mean 'test/GuessNumber-v0'") as caught:
        make("test/GuessNumbr-v0")
    assert "agentrl envs list" in str(caught.value)


def test_list_envs_reports_tools_read_from_the_class() -> None:
    infos = {info.id: info for info in list_envs()}
    info = infos[GUESS_NUMBER_ID]
    assert info.entry_point == "fixtures_envs:GuessNumberEnv"
    assert [spec["function"]["name"] for spec in info.tools] == ["guess"]


def test_tools_given_at_registration_override_the_class() -> None:
    spec = tool_spec("answer", "Answer.", {"text": {"type": "string"}})
    register("unit/ToolsOverride-v0", entry_point=GuessNumberEnv, tools=[spec])
    info = next(info for info in list_envs() if info.id == "unit/ToolsOverride-v0")
    assert info.tools == (spec,)


def test_make_refuses_to_drop_a_time_limit_wrapper() -> None:
    register("unit/TimeLimited-v0", entry_point=GuessNumberEnv, max_episode_steps=3)
    with pytest.raises(EnvError, match="TimeLimit"):
        make("unit/TimeLimited-v0")


def test_a_miss_loads_plugins_and_records_the_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "unit_plugin_echo.py").write_text(
        "from agentrl.env import register\n"
        "register('plugin/Guess-v0', entry_point='fixtures_envs:GuessNumberEnv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _use_plugins(monkeypatch, importlib.metadata.EntryPoint("echo", "unit_plugin_echo", "agentrl.envs"))
    assert type(make("plugin/Guess-v0")) is GuessNumberEnv
    infos = {info.id: info for info in list_envs()}
    assert infos["plugin/Guess-v0"].plugin == "echo"
    assert infos[GUESS_NUMBER_ID].plugin is None


def test_a_broken_plugin_is_never_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = importlib.metadata.EntryPoint("broken", "agentrl_unit_no_such_plugin", "agentrl.envs")
    _use_plugins(monkeypatch, broken)
    with pytest.raises(EnvPluginError, match="'broken'") as caught:
        make("plugin/Missing-v0")
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    with pytest.raises(EnvPluginError):
        list_envs()
    assert "agentrl_unit_no_such_plugin" not in sys.modules


def test_check_env_passes_on_the_test_env() -> None:
    check_env(make(GUESS_NUMBER_ID), options={"task": {"target": 42}})
    check_env(make(GUESS_NUMBER_ID, high=5))


@pytest.mark.parametrize(
    ("specs", "problem"),
    [
        ([{"name": "guess"}], "type"),
        ([tool_spec("bad name", "x", {})], "must match"),
        ([tool_spec("a", "x", {}), tool_spec("a", "y", {})], "duplicate"),
        ([{"type": "function", "function": {"name": "a", "parameters": {"type": "string"}}}], "object"),
        (
            [
                {
                    "type": "function",
                    "function": {"name": "a", "parameters": {"type": "object", "required": ["x"]}},
                }
            ],
            "required",
        ),
    ],
)
def test_check_tool_specs_rejects_invalid_specs(specs: Any, problem: str) -> None:
    with pytest.raises(EnvError, match=problem):
        check_tool_specs(specs)


class _TaskIgnoresSeedEnv(GuessNumberEnv):
    """Deterministic without a task (so Gymnasium's checks pass), not with one."""

    calls = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        observation, info = super().reset(seed=seed, options=options)
        if options and options.get("task"):
            _TaskIgnoresSeedEnv.calls += 1
            observation = f"round {_TaskIgnoresSeedEnv.calls}"
        return observation, info


class _UnhashableKeyEnv(GuessNumberEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        observation, _ = super().reset(seed=seed, options=options)
        return observation, {"state_key": ["not", "hashable"]}


def test_check_env_catches_a_first_observation_that_ignores_the_seed() -> None:
    with pytest.raises(EnvError, match="different first observations"):
        check_env(_TaskIgnoresSeedEnv(), options={"task": {"target": 3}})


def test_check_env_catches_an_unhashable_state_key() -> None:
    with pytest.raises(EnvError, match="hashable"):
        check_env(_UnhashableKeyEnv())
