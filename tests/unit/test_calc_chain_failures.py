"""`studies/scripts/calc_chain_failures.py`'s pure part: the labels of a calc-chain part that was not answered
right."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from calc_chain_failures import part_labels  # noqa: E402

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
