"""`studies/scripts/calc_chain_failures.py`'s pure part: the labels of a calc-chain part that was not answered
right, the first call's score (its expression apart from parsing and submitting), and a stored episode read
back for them."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from calc_chain_failures import analyse, first_call, part_labels, stored_episode  # noqa: E402

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
