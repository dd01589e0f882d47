"""studies/scripts/demo_failures.py's pure parts: each stored calc episode gets the outcome its turns show,
unclosed first calls are told apart from closed ones, and evaluations are picked by run name and step."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from bench_scripts import load_study_script

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    return load_study_script("demo_failures")


def python(code: str, observation: str) -> dict[str, Any]:
    text = '<tool_call>\n{"name": "python", "arguments": {"code": "' + code + '"}}\n</tool_call>'
    return {"text": text, "observation": observation}


def submit(answer: str, observation: str) -> dict[str, Any]:
    text = '<tool_call>\n{"name": "submit", "arguments": {"answer": "' + answer + '"}}\n</tool_call>'
    return {"text": text, "observation": observation}


def episode(
    turns: list[dict[str, Any]], success: bool = False, stop: str = "terminated", step: int = 0
) -> dict:
    return {"turns": turns, "success": success, "stop_reason": stop, "step": step}


SYNTAX = "exit code 1\nSyntaxError: closing parenthesis '}' does not match opening parenthesis '('"
SOLVED = episode([python("print(2 * 3)", "exit code 0\n6"), submit("6", "Correct.")], success=True)
BRACE = episode([python("print(2 * 3}", SYNTAX), submit("174421", "Incorrect.")])
WRONG = episode([python("print(2 * 3)", "exit code 0\n6"), submit("7", "Incorrect.")])
SILENT = episode([python("2 * 3", "exit code 0\n(no output)")] * 4, stop="max_turns")
MALFORMED = episode(
    [{"text": "<tool_call>{'name': python}</tool_call>", "observation": "Error"}], stop="max_turns"
)
INFRA = episode([python("print(1)", "exit code 0\n1")], stop="infra_error")


def test_each_episode_gets_the_outcome_its_turns_show() -> None:
    outcome = bench().outcome
    assert [outcome(e) for e in (SOLVED, BRACE, WRONG, SILENT, MALFORMED, INFRA)] == [
        "solved",
        "syntax_error",
        "wrong_answer",
        "never_submitted",
        "never_submitted",
        "infra",
    ]


def test_unclosed_first_calls_are_told_apart() -> None:
    module = bench()
    assert module.unclosed(BRACE)
    assert module.unclosed(episode([python("print(2 * 3", SYNTAX)]))
    assert not module.unclosed(SOLVED)
    assert not module.unclosed(SILENT)
    nested = episode([python("print({1: 2})", "exit code 0\n{1: 2}")])
    assert not module.unclosed(nested)  # a dict inside a closed print( is not the failure


def test_summary_counts_every_outcome() -> None:
    figures = bench().summarise([SOLVED, BRACE, BRACE, WRONG, SILENT])
    assert figures == {
        "episodes": 5,
        "outcomes": {"solved": 1, "infra": 0, "syntax_error": 2, "never_submitted": 1, "wrong_answer": 1},
        "unclosed_calls": 2,
        "unclosed_solved": 0,
    }


def test_evaluations_pick_the_first_and_last_step_and_the_controls() -> None:
    stored = {
        ("demo", "eval"): [{**WRONG, "step": 0}, {**SOLVED, "step": 4}],
        ("demo", "train"): [{**WRONG, "step": 1}, {**BRACE, "step": 2}, {**SOLVED, "step": 2}],
        ("demo-control-trained", "eval"): [BRACE],
    }
    result = bench().evaluations("demo", lambda name, split: stored.get((name, split)))
    assert result["evaluations"]["before"]["outcomes"]["wrong_answer"] == 1
    assert result["evaluations"]["after"]["outcomes"]["solved"] == 1
    assert "control-before" not in result["evaluations"]  # no such run in the store
    assert result["evaluations"]["control-after"]["unclosed_calls"] == 1
    assert result["training"] == {"1": [0, 1], "2": [1, 2]}


def test_benchmarks_page_quotes_the_committed_file() -> None:
    result = json.loads((ROOT / "studies" / "calc-demo" / "results" / "demo_failures.json").read_text())
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert bench().report(result) in page
