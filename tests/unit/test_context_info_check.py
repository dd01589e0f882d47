"""The optional context keys of a step's info (`context_reset`, `state_text`): `check_env` accepts them
well-formed and refuses them malformed, and `agentrl envs check` reports both (through a real service on a
loopback port, no Docker needed)."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.devtools import service_check as check
from agentrl.devtools.service_check import CheckConfig, EpisodeTrace, check_service_env, format_report
from agentrl.env import INFO_CONTEXT_RESET, INFO_STATE_TEXT, Env, StepResult, check_env, register, tool_spec
from agentrl.env.checker import STATE_TEXT_MAX_CHARS, check_context_info
from agentrl.errors import EnvError
from agentrl.types import Action

QUICK = CheckConfig(episodes=4, group_size=2, max_turns=6, teardown_s=0.0)
TASKS = [{"id": "t1"}, {"id": "t2"}]


class PartsEnv(Env):
    """Two parts of one turn each: the first step ends part 1 (a context boundary), the second the episode.
    `extra` is what the first step's info adds."""

    tools = (tool_spec("say", "Say a word", {"word": {"type": "string"}}),)
    blocking = False
    extra: dict[str, Any] = {INFO_CONTEXT_RESET: True, INFO_STATE_TEXT: "part 1 done"}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return "Part 1: say a word.", {"state_key": "part 1"}

    def step(self, action: Action) -> StepResult:
        self._steps += 1
        if self._steps == 1:
            return StepResult("Part 2: say a word.", 0.0, False, False, {"state_key": "part 2", **self.extra})
        return StepResult("done", 1.0, True, False, {"state_key": "done", "success": True})


class BadResetEnv(PartsEnv):
    extra = {INFO_CONTEXT_RESET: "yes"}


class BadTextEnv(PartsEnv):
    extra = {INFO_CONTEXT_RESET: True, INFO_STATE_TEXT: ["a.py"]}


register("test/ContextParts-v0", entry_point=PartsEnv)
register("test/BadContextReset-v0", entry_point=BadResetEnv)


@pytest.mark.parametrize(
    "info",
    [
        {},
        {INFO_CONTEXT_RESET: True},
        {INFO_CONTEXT_RESET: False, INFO_STATE_TEXT: "files changed so far: a.py"},
        {INFO_STATE_TEXT: None},
        {INFO_STATE_TEXT: "x" * STATE_TEXT_MAX_CHARS},
    ],
)
def test_well_formed_context_keys_pass(info: dict[str, Any]) -> None:
    check_context_info(info)


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({INFO_CONTEXT_RESET: 1}, r"step: info\['context_reset'\] must be a bool, got int; set True"),
        ({INFO_CONTEXT_RESET: "yes"}, r"info\['context_reset'\] must be a bool, got str"),
        ({INFO_STATE_TEXT: 42}, r"step: info\['state_text'\] must be a str, got int; write what the agent"),
        ({INFO_STATE_TEXT: "x" * 2001}, r"info\['state_text'\] is a str of 2001 chars, more than 2000"),
    ],
)
def test_malformed_context_keys_are_refused_naming_the_key_and_the_type(
    info: dict[str, Any], message: str
) -> None:
    with pytest.raises(EnvError, match=message):
        check_context_info(info)


def test_check_env_checks_the_context_keys_of_the_step_it_takes() -> None:
    check_env(PartsEnv())
    with pytest.raises(EnvError, match=r"info\['context_reset'\] must be a bool, got str"):
        check_env(BadResetEnv())
    with pytest.raises(EnvError, match=r"info\['state_text'\] must be a str, got list"):
        check_env(BadTextEnv())


def test_context_findings_fail_on_a_malformed_key_and_count_boundaries_only_when_there_are_some() -> None:
    assert check.context_findings([EpisodeTrace(group=0)]) == []
    counted = check.context_findings([EpisodeTrace(group=0, context_resets=2), EpisodeTrace(group=0)])
    assert [(f.status, f.topic) for f in counted] == [("ok", "context boundaries")]
    assert counted[0].message.startswith('2 steps set info["context_reset"]')
    bad = EpisodeTrace(group=1, context_resets=1, context_errors=["step 1: info['state_text'] must be a str"])
    (finding,) = check.context_findings([bad, bad])
    assert finding.status == "FAIL" and "2 steps with a malformed" in finding.message
    assert "(first: step 1: info['state_text'] must be a str)" in finding.message


def test_envs_check_counts_context_boundaries_and_fails_a_malformed_context_reset() -> None:
    report = check_service_env("test/ContextParts-v0", TASKS, config=QUICK)
    assert report.failures == 0, format_report(report)
    assert 'ok    context boundaries: 4 steps set info["context_reset"]' in format_report(report)
    bad = check_service_env("test/BadContextReset-v0", TASKS, config=QUICK)
    statuses = {finding.topic: finding.status for finding in bad.findings}
    assert statuses["context boundaries"] == "FAIL" and statuses["check_env"] == "FAIL"
    assert "info['context_reset'] must be a bool, got str" in format_report(bad)
    assert bad.exit_code() == 1
