"""SWEBenchEnv with Docker: the Env contract, the tools, grading integrity, and `agentrl swebench validate`.

Every attack below would make the failing tests pass inside the agent's own workspace (each test shows it
does), and none of them is rewarded, because grading runs in a fresh container on the agent's diff with test
files and pytest configuration filtered out and restored.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentrl_swebench.env import SWEBenchEnv

from agentrl.env import check_env
from agentrl.types import Action, ToolCall

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "tasks" / "swebench-local"
CONFTEST_HACK = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def load_records() -> list[dict[str, Any]]:
    files = [(TASKS / f"{split}.jsonl").read_text() for split in ("train", "heldout")]
    return [json.loads(line) for text in files for line in text.splitlines()]


def first_of(project: str) -> dict[str, Any]:
    return next(r for r in load_records() if r["repo"] == f"pypi/{project}")


def call(name: str, **arguments: object) -> Action:
    return Action(text="", tool_calls=(ToolCall(name=name, arguments=arguments),))


def heredoc(command: str, text: str) -> str:
    return f"{command} <<'AGENTRL_EOF'\n{text}AGENTRL_EOF"


@pytest.fixture(scope="module", autouse=True)
def images() -> None:
    built = subprocess.run(
        ["bash", "scripts/build_swebench_images.sh"], cwd=REPO, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return first_of("inflection")


@pytest.fixture
def env(record: dict[str, Any]) -> Iterator[SWEBenchEnv]:
    swe = SWEBenchEnv(max_steps=8)
    swe.reset(seed=0, options={"task": record})
    yield swe
    swe.close()


def f2p_passes_in_workspace(env: SWEBenchEnv, record: dict[str, Any]) -> bool:
    tests = " ".join(f"'{test}'" for test in record["FAIL_TO_PASS"])
    result = env.step(call("bash", command=f"python3 -m pytest -q -p no:cacheprovider {tests}"))
    return "<returncode>0</returncode>" in result.observation


def test_check_env_passes(record: dict[str, Any]) -> None:
    swe = SWEBenchEnv(max_steps=2)
    try:
        check_env(swe, options={"task": record})
    finally:
        swe.close()


def test_the_workspace_has_one_commit_and_the_bug(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    log = env.step(call("bash", command="git log --all --format=%H%n%s | cat; git tag; git remote -v"))
    assert log.observation.split("<output>\n")[1] == f"{record['base_commit']}\nbase\n</output>"
    assert not f2p_passes_in_workspace(env, record)


def test_the_tools_work_and_the_state_key_follows_the_files(record: dict[str, Any]) -> None:
    swe = SWEBenchEnv(max_steps=10, command_timeout_s=2)
    try:
        _, info = swe.reset(seed=0, options={"task": record})
        echo = swe.step(call("bash", command="echo hi; exit 3"))
        assert echo.observation == "<returncode>3</returncode>\n<output>\nhi\n</output>"
        assert echo.info["state_key"] == info["state_key"]
        slow = swe.step(call("bash", command="sleep 10"))
        assert "timed out" in slow.observation and slow.info["timed_out"]
        view = swe.step(call("view", path="setup.py", start=1, end=2))
        assert view.observation.startswith("<returncode>0</returncode>") and "     1\t" in view.observation
        missing = swe.step(call("str_replace", path="setup.py", old="no such text", new="x"))
        assert "occurs 0 times" in missing.observation and "<returncode>1</returncode>" in missing.observation
        edit = swe.step(call("str_replace", path="setup.py", old="#!/usr/bin/env python", new="# edited"))
        assert "     1\t# edited" in edit.observation and edit.info["state_key"] != info["state_key"]
        back = swe.step(call("bash", command="git checkout -q setup.py"))
        assert back.info["state_key"] == info["state_key"]
        invalid = swe.step(Action(text="I think the bug is in line 3."))
        assert invalid.info["invalid"] and "<tool_call>" in invalid.observation
    finally:
        swe.close()


def test_the_gold_fix_resolves_with_an_official_report(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    started = time.monotonic()
    env.step(call("bash", command=heredoc("git apply", record["patch"])))
    assert f2p_passes_in_workspace(env, record)
    result = env.step(call("submit"))
    assert result.terminated and result.reward == 1.0 and result.info["resolved"]
    entry = result.info["report"][record["instance_id"]]
    assert entry["patch_successfully_applied"] and entry["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    print(f"episode with the gold fix: {time.monotonic() - started:.2f} s")


def test_committing_the_fix_still_counts(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    env.step(call("bash", command=heredoc("git apply", record["patch"]) + "\ngit commit -qam fix"))
    assert env.step(call("submit")).reward == 1.0


def test_partial_credit_is_off_by_default_and_on_as_an_option(record: dict[str, Any]) -> None:
    swe = SWEBenchEnv(max_steps=1, partial_credit=True)
    try:
        swe.reset(seed=0, options={"task": record})
        result = swe.step(call("bash", command="true"))  # the last step: graded without a fix
        assert result.truncated and result.reward == 0.0 and result.info["resolved"] is False
    finally:
        swe.close()


ATTACKS = {
    "edit the tests": "find . -name 'test*.py' -exec sed -i 's/assert /assert True or /' {} +",
    "delete the tests": "find . -name 'test*.py' -delete",
    "add a conftest that passes everything": heredoc("cat > conftest.py", CONFTEST_HACK),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_tampering_with_the_tests_is_not_rewarded(
    env: SWEBenchEnv, record: dict[str, Any], attack: str
) -> None:
    env.step(call("bash", command=ATTACKS[attack]))
    if attack != "delete the tests":  # the attack works in the agent's own workspace...
        assert f2p_passes_in_workspace(env, record)
    result = env.step(call("submit"))  # ...but not where it is graded
    assert result.reward == 0.0 and not result.info["resolved"]
    assert result.info["report"][record["instance_id"]]["dropped_paths"]


def test_fake_result_files_are_not_rewarded(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    passed = "".join(f"PASSED {test}\n" for test in record["FAIL_TO_PASS"] + record["PASS_TO_PASS"])
    junit = '<testsuite tests="1" failures="0"><testcase name="x"/></testsuite>\n'
    env.step(call("bash", command=heredoc("tee results.log /tmp/results.log report.txt", passed)))
    env.step(call("bash", command=heredoc("tee junit.xml report.xml", junit)))
    env.step(call("bash", command="echo '{\"resolved\": true}' > report.json; echo 1.0 > reward.txt"))
    result = env.step(call("submit"))
    assert result.reward == 0.0 and not result.info["resolved"]


def test_a_broken_git_gives_no_patch_and_no_reward(env: SWEBenchEnv, record: dict[str, Any]) -> None:
    env.step(call("bash", command=heredoc("git apply", record["patch"]) + "\nrm -rf .git"))
    result = env.step(call("submit"))
    assert result.reward == 0.0 and result.info["report"][record["instance_id"]]["patch_is_None"]


def test_validate_resolves_gold_and_fails_empty_patches() -> None:
    instances = [first_of(project)["instance_id"] for project in ("inflection", "parse", "toolz")]
    command = [sys.executable, "-m", "agentrl.cli.main", "swebench", "validate", "--instances", *instances]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["n_instances"] == 3 and summary["gold_resolved"] == 3 and summary["empty_resolved"] == 0
    assert set(summary) == {"n_instances", "gold_resolved", "empty_resolved", "seconds"}
