"""`agentrl envs check|list|new`: the check's findings on envs that keep and break the contract (through a
real service on a loopback port, no Docker needed), its pure parts, and the CLI around it."""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

import fixtures_envs  # noqa: F401  (registers test/GuessNumber-v0 and test/LostSandbox-v0)
import numpy as np
import pytest

from agentrl.agent.parsing import parse_turn
from agentrl.cli.main import main
from agentrl.devtools import service_check as check
from agentrl.devtools.service_check import CheckConfig, EpisodeTrace, check_service_env, format_report
from agentrl.env import Env, StepResult, register, render_tool_call, tool_spec, transcript_policy
from agentrl.errors import EnvError
from agentrl.types import Action, ToolCall

GUESS_TASKS = [{"id": f"t{target}", "target": target} for target in (3, 8, 16)]
WORDS = [{"id": "w1", "word": "yes"}, {"id": "w2", "word": "hello"}]
QUICK = CheckConfig(episodes=4, group_size=2, max_turns=6, teardown_s=0.0)


class SayEnv(Env):
    """Say the task's word: success (and reward 1) when it is right; one turn."""

    tools = (tool_spec("say", "Say a word", {"word": {"type": "string"}}),)
    blocking = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._task = (options or {}).get("task") or {"id": "t", "word": "hello"}
        self._said: list[str] = []
        return f"Say {self._task['word']!r}.", {"state_key": "start"}

    def step(self, action: Action) -> StepResult:
        calls = [call for call in action.tool_calls if call.name == "say"]
        success = bool(calls) and calls[0].arguments.get("word") == self._task["word"]
        return StepResult("ok", float(success), True, False, {"state_key": "said", "success": success})


class HistoryKeyEnv(SayEnv):
    """Keys its state by everything said so far: a key of the history, which never recurs."""

    def step(self, action: Action) -> StepResult:
        self._said.append(action.text)
        key = "|".join(self._said)
        return StepResult("ok", 0.0, False, len(self._said) >= 3, {"state_key": key})


class SlowStepEnv(SayEnv):
    """Non-blocking, but each step sleeps: it would stall the service's event loop."""

    def step(self, action: Action) -> StepResult:
        time.sleep(0.1)
        return StepResult("ok", 0.0, True, False, {"state_key": "done"})


def say_the_word(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[Action, str, None]:
    """A `ScriptedPolicy`: one turn, the word."""
    yield Action(text="", tool_calls=(ToolCall("say", {"word": task["word"]}),))


class ScriptedSayEnv(SayEnv):
    scripted_policy = staticmethod(say_the_word)


class PickySayEnv(SayEnv):
    """Refuses, at reset, a task whose word is not a plain lowercase word (the task's fault)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        word = ((options or {}).get("task") or {}).get("word", "hello")
        if not str(word).isalpha():
            raise EnvError(f"the task's word must be letters only, got {word!r}")
        return super().reset(seed=seed, options=options)


class NoKeyEnv(SayEnv):
    """Forgets info["state_key"] on its steps."""

    def step(self, action: Action) -> StepResult:
        return StepResult("ok", 0.0, True, False, {})


register("test/Say-v0", entry_point=SayEnv)
register("test/HistoryKeys-v0", entry_point=HistoryKeyEnv)
register("test/SlowStep-v0", entry_point=SlowStepEnv)
register("test/NoKey-v0", entry_point=NoKeyEnv)
register("test/PickySay-v0", entry_point=PickySayEnv)
register("test/ScriptedSay-v0", entry_point=ScriptedSayEnv)


def statuses(report: Any) -> dict[str, str]:
    return {finding.topic: finding.status for finding in report.findings}


def oracle(task: Mapping[str, Any], transcript: Sequence[str]) -> str:
    return render_tool_call("say", {"word": task["word"]})


def chatter() -> Any:
    """A scripted policy whose every turn is a text never said before."""
    turns = itertools.count()
    return transcript_policy(lambda task, transcript: f"turn {next(turns)}")


def test_a_random_turn_is_a_call_the_parser_reads_with_arguments_of_the_schemas_types() -> None:
    tools = (
        tool_spec("guess", "", {"number": {"type": "integer"}}),
        tool_spec(
            "pick", "", {"side": {"type": "string", "enum": ["left", "right"]}, "fast": {"type": "boolean"}}
        ),
    )
    rng = np.random.default_rng(0)
    actions = [parse_turn(check.random_turn(tools, rng)) for _ in range(200)]
    calls = [action.tool_calls[0] for action in actions if action.tool_calls]
    assert 0 < len(actions) - len(calls) < 80  # about one turn in five is plain text
    assert all(action.parse_error is None for action in actions)
    assert {call.name for call in calls} == {"guess", "pick"}
    for call in calls:
        if call.name == "guess":
            assert isinstance(call.arguments["number"], int)
        else:
            assert call.arguments["side"] in ("left", "right") and isinstance(call.arguments["fast"], bool)


def test_recurrence_counts_steps_whose_state_another_episode_of_the_group_reached() -> None:
    traces = [
        EpisodeTrace(group=0, reset_key="s", keys=["a", "b"]),
        EpisodeTrace(group=0, reset_key="s", keys=["a", None]),
        EpisodeTrace(group=1, reset_key="z", keys=["b"]),  # another group: "b" does not count
    ]
    assert check.recurrence_rate(traces) == pytest.approx(2 / 4)
    assert check.recurrence_rate([EpisodeTrace(group=0, keys=["x"])]) == 0.0


def test_an_env_that_keeps_the_contract_passes_with_the_random_policy() -> None:
    report = check_service_env("test/GuessNumber-v0", GUESS_TASKS, config=QUICK)
    assert report.failures == 0 and report.exit_code() == 0, format_report(report)
    assert set(statuses(report)) == {
        "check_env",
        "sessions",
        "episodes",
        "invalid turns",
        "state keys",
        "observations",
        "step latency",
        "containers",
        "fork",
    }
    text = format_report(report)
    assert "p50" in text and "p99" in text and text.endswith("warnings)")


def test_a_scripted_policy_reaches_success_and_one_that_never_does_fails() -> None:
    won = check_service_env("test/Say-v0", WORDS, policy=transcript_policy(oracle), config=QUICK)
    assert won.failures == 0 and "success 4/4" in format_report(won)
    never = check_service_env("test/Say-v0", WORDS, policy=chatter(), config=QUICK)
    assert statuses(never)["success"] == "FAIL" and never.exit_code() == 1


def test_a_step_that_loses_its_sandbox_fails_the_sessions_line() -> None:
    report = check_service_env("test/LostSandbox-v0", [{"id": "t", "target": 3}], config=QUICK)
    assert statuses(report)["sessions"] == "FAIL"
    assert "ServiceUnavailable" in format_report(report)


def test_history_keys_and_a_slow_non_blocking_step_warn_and_missing_keys_fail() -> None:
    history = check_service_env("test/HistoryKeys-v0", WORDS, policy=chatter(), config=QUICK)
    assert statuses(history)["state keys"] == "warn" and statuses(history)["check_env"] == "ok"
    slow = check_service_env("test/SlowStep-v0", WORDS, config=QUICK)
    assert statuses(slow)["step latency"] == "warn" and "blocking = True" in format_report(slow)
    assert slow.failures == 0 and slow.exit_code() == 0 and slow.exit_code(strict=True) == 1
    missing = check_service_env("test/NoKey-v0", WORDS, config=QUICK)
    assert statuses(missing)["state keys"] == "FAIL" and statuses(missing)["check_env"] == "FAIL"


def test_a_refused_task_is_the_task_fault_with_its_file_and_line_and_nothing_else_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tasks" / "picky").mkdir(parents=True)
    lines = ['{"id": "good", "word": "yes"}', '{"id": "bad", "word": "4 2"}']
    (tmp_path / "tasks" / "picky" / "train.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    command = ["envs", "check", "test/PickySay-v0", "--suite", "picky", "--episodes", "4", "--policy"]
    assert main([*command, f"{__name__}:say_the_word"]) == 1
    out = capsys.readouterr().out
    found = {line.split(":")[0].split()[-1]: line for line in out.splitlines()[1:-1]}
    assert "FAIL" in found["tasks"] and "tasks/picky/train.jsonl:2" in found["tasks"]
    assert "letters only, got '4 2'" in found["tasks"] and "task 'bad'" in found["tasks"]
    assert "2 refused" in found["sessions"] and "0 errors" in found["sessions"]
    assert "2 opened" in found["sessions"]
    assert out.count("FAIL") == 2  # the tasks line and the verdict: no cascade into state keys or check_env
    assert "missing after" not in out and "result: FAIL (1 failures" in out


def test_a_container_that_outlives_the_check_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "_own_containers", lambda: {"old", "leaked0123456789"})
    finding = check.container_finding({"old"}, {"old", "leaked0123456789", "gone"}, teardown_s=0.0)
    assert finding.status == "FAIL" and "leaked012345" in finding.message
    assert check.container_finding(None, set(), 0.0).status == "ok"  # no Docker: not checked


@pytest.fixture
def suites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A working directory with the task suites `guess` and `words`, one train task each."""
    for suite, task in (("guess", '{"id": "a", "target": 5}'), ("words", '{"id": "w", "word": "yes"}')):
        (tmp_path / "tasks" / suite).mkdir(parents=True)
        (tmp_path / "tasks" / suite / "train.jsonl").write_text(task + "\n")
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("suites")
def test_envs_check_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "test/GuessNumber-v0", "--suite", "guess", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "envs check test/GuessNumber-v0 (suite guess; tasks tasks/guess/train.jsonl; policy random; "
        "2 episodes in groups of 2)"
    )
    assert "result: PASS" in out
    assert main(["envs", "check", "test/GuessNumbr-v0", "--suite", "guess"]) == 2
    assert "Did you mean 'test/GuessNumber-v0'" in capsys.readouterr().err
    assert main(["envs", "check", "test/GuessNumber-v0", "--policy", "no_module_here:solve"]) == 2


@pytest.mark.usefixtures("suites")
def test_envs_check_plays_the_env_own_scripted_policy_or_one_named_by_module(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check = ["envs", "check", "test/ScriptedSay-v0", "--suite", "words", "--episodes", "2"]
    for policy in ("scripted", f"{__name__}:say_the_word", f"{__name__}:oracle"):
        assert main([*check, "--policy", policy]) == 0
        assert "success 2/2" in capsys.readouterr().out
    assert main(["envs", "check", "test/Say-v0", "--suite", "words", "--policy", "scripted"]) == 2
    assert "has no scripted policy" in capsys.readouterr().err


def test_envs_check_needs_a_config_or_a_suite_for_an_env_no_config_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["envs", "check", "test/GuessNumber-v0"]) == 2
    assert "no run config names 'test/GuessNumber-v0'" in capsys.readouterr().err


def test_envs_list_shows_plugin_version_tools_config_and_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "PLUGIN", "TOOLS", "CONFIG", "TASKS"]
    maze = next(line for line in lines if line.startswith("agentrl/Maze-v0"))
    assert "maze (agentrl-env-maze 0.1.0)" in maze and maze.split()[-2:] == ["maze", "maze/level1"]


def test_envs_new_writes_a_plugin_and_refuses_to_overwrite_or_clash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "hilo"
    assert main(["envs", "new", "hilo", "--dir", str(folder)]) == 0
    assert "pip install -e" in capsys.readouterr().out
    assert (folder / "agentrl_hilo" / "data" / "tasks" / "hilo" / "train.jsonl").stat().st_size > 0
    assert main(["envs", "new", "hilo", "--dir", str(folder)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["envs", "new", "Hi Lo", "--dir", str(tmp_path / "x")]) == 2
    assert main(["envs", "new", "calc", "--dir", str(tmp_path / "calc")]) == 2  # agentrl_calc is installed
    assert "already importable" in capsys.readouterr().err
