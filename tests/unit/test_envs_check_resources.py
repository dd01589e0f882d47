"""Unclosed files and sockets: `recording_resource_warnings` (agentrl.env.checker) and the "resources" line
of `agentrl envs check`, on a tiny env that leaks a file at every reset and one that closes what it opens.

What this is not: the check of the shipped envs (their own tests fail on a ResourceWarning: the conftest.py of
envs/swebench/tests and envs/web/tests), or of the rest of the report (tests/unit/test_envs_check.py).
"""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import IO, Any

import pytest

from agentrl.cli.envs import resource_finding
from agentrl.cli.main import main
from agentrl.env import Env, StepResult, register, tool_spec
from agentrl.env.checker import recording_resource_warnings
from agentrl.types import Action

NOTES = Path(__file__)  # any file that exists: the envs below only open it


class LeakyNotesEnv(Env):
    """Opens its notes at every reset and never closes them: a ResourceWarning per reset."""

    tools = (tool_spec("say", "Say a word", {"word": {"type": "string"}}),)
    blocking = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._notes: IO[str] | None = NOTES.open()
        self._notes = None  # dropped, still open
        return "Say a word.", {"state_key": "start"}

    def step(self, action: Action) -> StepResult:
        return StepResult("ok", 0.0, True, False, {"state_key": "said"})


class TidyNotesEnv(LeakyNotesEnv):
    """Keeps its notes open for the episode and closes them on the next reset and in close()."""

    _notes: IO[str] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super(LeakyNotesEnv, self).reset(seed=seed)
        self.close()
        self._notes = NOTES.open()
        return "Say a word.", {"state_key": "start"}

    def close(self) -> None:
        if self._notes is not None:
            self._notes.close()
            self._notes = None


register("test/LeakyNotes-v0", entry_point=LeakyNotesEnv)
register("test/TidyNotes-v0", entry_point=TidyNotesEnv)


def test_the_recorder_names_leaked_files_also_in_garbage_cycles_and_passes_other_warnings_on() -> None:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(5)
    try:
        with pytest.warns(UserWarning, match="not a leak"), recording_resource_warnings() as leaks:
            NOTES.open()
            cycle: list[Any] = [NOTES.open()]
            cycle.append(cycle)  # freed only by the collector, which the recorder runs at its end
            del cycle
            warnings.warn("not a leak", UserWarning, stacklevel=1)
    finally:
        if started:
            tracemalloc.stop()
    assert len(leaks) == 2 and all("unclosed file" in leak and NOTES.name in leak for leak in leaks)
    assert all(f"opened at {__file__}:" in leak for leak in leaks), leaks
    with recording_resource_warnings() as none:
        with NOTES.open() as notes:
            notes.read(1)
    assert none == []


def test_the_resources_line_counts_each_warning_and_names_each_leak_once() -> None:
    assert resource_finding([]).status == "ok"
    leaks = [f"unclosed <socket.socket fd={fd}>, opened at env.py:7" for fd in (11, 12)] + [
        f"unclosed file <{name}>" for name in "abcd"
    ]
    finding = resource_finding(leaks)
    assert finding.status == "warn" and finding.topic == "resources"
    assert finding.message.startswith("6 ResourceWarning(s), files or sockets never closed: ")
    assert "unclosed <socket.socket fd=N>, opened at env.py:7; unclosed file <a>; unclosed file <b>" in (
        finding.message
    )
    assert "(and 2 more)" in finding.message and "env.close()" in finding.message


@pytest.fixture
def words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A working directory with the task suite `words` (two train tasks)."""
    (tmp_path / "tasks" / "words").mkdir(parents=True)
    (tmp_path / "tasks" / "words" / "train.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("words")
def test_envs_check_warns_of_an_env_that_leaks_a_file_and_not_of_one_that_closes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check = ["envs", "check", "--suite", "words", "--episodes", "2"]
    assert main([*check, "test/LeakyNotes-v0"]) == 0  # a warning, not a failure...
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "resources:" in line)
    assert line.split()[0] == "warn" and "ResourceWarning(s)" in line, out
    assert f"unclosed file <_io.TextIOWrapper name='{NOTES}'" in line
    assert main([*check, "--strict", "test/LeakyNotes-v0"]) == 1  # ...which --strict fails
    capsys.readouterr()
    assert main([*check, "test/TidyNotes-v0"]) == 0
    out = capsys.readouterr().out
    assert "ok    resources: every file and socket opened was closed" in out, out
    assert "result: PASS (0 failures, 1 warnings)" in out  # the fork's: the episode ends at its first turn
