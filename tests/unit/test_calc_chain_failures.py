"""`studies/scripts/calc_chain_failures.py`'s pure part: the labels of a calc-chain part that was not answered
right, the first call's score (its expression apart from parsing and submitting), and a stored episode read
back for them."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from calc_chain_failures import (  # noqa: E402
    TABLE_COLUMNS,
    analyse,
    failure_table,
    first_call,
    group_shares,
    groups_of,
    part_labels,
    stored_episode,
)

from agentrl.types import Action, ToolCall, Turn  # noqa: E402


def turn(name: str, arguments: dict[str, str], observation: str, text: str | None = None) -> Turn:
    call = ToolCall(name=name, arguments=arguments)
    return Turn(
        index=0,
        prompt_ids=(),
        completion_ids=(),
        completion_logprobs=(),
        text=text if text is not None else f"{name}({arguments})",
        action=Action(text="", tool_calls=(call,)),
        observation=observation,
        reward=0.0,
        invalid=False,
        state_key=None,
    )


def test_a_repeated_call_that_prints_nothing_and_never_submits() -> None:
    silent = turn("python", {"code": "14122"}, "exit code 0\n(no output; print() what you want to see)")
    assert part_labels([silent, silent, silent], "75179", []) == [
        "no_print",
        "repeated_action",
        "never_submitted",
    ]


def test_a_syntax_error_then_a_wrong_submit_of_an_earlier_answer() -> None:
    broken = turn("python", {"code": "print(1 * 2}"}, "exit code 1\nSyntaxError: closing parenthesis")
    carried = turn("submit", {"answer": "25034"}, "Part 3 of 3: ...")
    assert part_labels([broken, carried], "27536", ["25034"]) == ["carried_answer", "syntax_error"]


def test_the_negative_of_the_answer_is_a_swap_and_a_plain_wrong_answer_is_other() -> None:
    computed = turn("python", {"code": "print(488 * 19 - 289 * 17)"}, "exit code 0\n4359")
    assert part_labels([computed, turn("submit", {"answer": "4359"}, "")], "-4359", []) == ["swapped"]
    assert part_labels([computed, turn("submit", {"answer": "12"}, "")], "-4359", []) == ["wrong_other"]


def scored(code: str, answer: str = "-6648", expression: str = "222 * 28 - 134 * 96") -> str:
    return first_call([turn("python", {"code": code}, "exit code 0\n1")], expression, answer)["expression"]


def test_the_first_calls_expression_is_scored_by_its_value_then_its_operands() -> None:
    assert scored("print(222 * 28 - 134 * 96)") == "right"
    assert scored("x = 28 * 222 - 96 * 134\nprint(x)") == "right"  # the same value in another order
    assert scored("print(134 * 96 - 222 * 28)") == "operands_misordered"  # the reversed subtraction
    assert scored("print(222 * 28 + 134 * 96)") == "operands_misordered"
    assert scored("print(222 * 29 - 134 * 96)") == "wrong_operands"
    three = "423 * 59 - 564 * 68 - 654 * 74"  # a depot chain: middle product left out, then one added
    assert scored("print(423 * 59 - 654 * 74)", "-61791", three) == "term_dropped"
    assert scored("print(423 * 59 - 654 * 74 - 4)", "-61791", three) == "wrong_operands"
    assert scored("print(222 * 28 - ") == "not_arithmetic" and scored("print(total)") == "not_arithmetic"


def test_the_first_call_is_scored_apart_from_parsing_submitting_and_the_outcome() -> None:
    unparsed = replace(
        turn("python", {"code": "print(1 + 1)"}, "error"),
        action=Action(text="", tool_calls=(), parse_error="not JSON"),
    )
    computed = turn("python", {"code": "print(222 * 28 - 134 * 96)"}, "exit code 0\n-6648")
    answered = replace(turn("submit", {"answer": "-6648"}, "right"), info={"part_correct": True})
    score = first_call([unparsed, computed, answered], "222 * 28 - 134 * 96", "-6648")
    assert score == {"parses": False, "expression": "right", "submitted": True, "right": True}
    alone = first_call([turn("submit", {"answer": "7"}, "")], "222 * 28 - 134 * 96", "-6648")
    assert alone == {"parses": True, "expression": "no_python", "submitted": True, "right": False}


def test_a_stored_episode_is_read_back_with_its_calls_parsed_from_the_text() -> None:
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(2 * 3 - 1 * 4)"}}</tool_call>'
    row = {
        "task_id": "t",
        "error": None,
        "turns": [
            {"index": 1, "text": "<tool_call>{bad</tool_call>", "observation": "error", "reward": 0.0,
             "invalid": True, "state_key": None, "info": {"part": 0}},
            {"index": 0, "text": call, "observation": "exit code 0\n2", "reward": 0.0, "invalid": False,
             "state_key": None, "info": {"part": 0}},
        ],
    }  # fmt: skip
    episode = stored_episode(row)
    assert [t.index for t in episode.turns] == [0, 1] and not episode.is_infra_failure
    assert episode.turns[0].action.tool_calls[0].arguments == {"code": "print(2 * 3 - 1 * 4)"}
    assert episode.turns[1].action.parse_error
    task = {"id": "t", "answers": ["2"], "expressions": ["2 * 3 - 1 * 4"], "questions": ["q"]}
    found = analyse([episode], [task], parts=1)
    assert found["first_call_by_part"][0]["expression_right"] == 1.0
    assert found["first_call_by_part"][0]["parses"] == 1.0 and found["first_call_by_part"][0]["right"] == 0.0


def labelled_run(right: float, misordered: float) -> dict[str, object]:
    """A run's labels with two parts, each with `right` and `misordered` shares (the rest wrong operands)."""
    part = {key: 0.0 for key, _ in TABLE_COLUMNS}
    part.update(right=right, expression_right=right, expression_operands_misordered=misordered)
    part["expression_wrong_operands"] = 1.0 - right - misordered
    return {"first_call_by_part": [part, {**part, "right": right / 2}]}


def test_the_failure_table_groups_each_arm_over_its_seeds_and_counts_unlabelled_runs() -> None:
    planned = [
        ("base", None),
        ("sft", None),
        ("grpo-seed0", "grpo"),
        ("grpo-seed1", "grpo"),
        ("gigpo-seed0", "gigpo"),
    ]
    groups = groups_of(planned)
    assert groups == {
        "base": ["base"],
        "sft": ["sft"],
        "grpo": ["grpo-seed0", "grpo-seed1"],
        "gigpo": ["gigpo-seed0"],
    }
    runs = {"base": labelled_run(0.4, 0.2), "sft": None, "grpo-seed0": labelled_run(0.8, 0.1),
            "grpo-seed1": labelled_run(0.0, 0.5), "gigpo-seed0": None}  # fmt: skip
    grpo = group_shares(runs, groups["grpo"])
    # each run: the mean over its two parts (right r and r/2), then the mean over the arm's two seeds
    assert grpo["runs"] == 2 and grpo["shares"]["right"] == pytest.approx((0.6 + 0.0) / 2)
    assert grpo["shares"]["expression_operands_misordered"] == pytest.approx(0.3)
    assert group_shares(runs, groups["gigpo"]) == {"runs": 0, "not_labelled": 1, "shares": {}}
    table = failure_table({"set": "heldout-256", "temperature": 0.0, "runs": runs}, groups)
    assert table.startswith("Each part's first call, on heldout-256 at T=0")
    row = "| base | 1 of 1 | 0.300 | 0.000 | 0.000 | 0.400 | 0.200 | 0.000 | 0.400 | 0.000 | 0.000 |"
    assert row in table
    assert "| gigpo | 0 of 1 |" in table and "| grpo | 2 of 2 | 0.300 |" in table
