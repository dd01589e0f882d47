"""`studies/scripts/calc_chain_levels.py`'s pure part: a training run's parts counted per step and problem
level (right, a product left out), summed over env-step windows, and the table of them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from calc_chain_levels import level_table, step_counts, windows  # noqa: E402

from agentrl.types import Action, ToolCall, Turn  # noqa: E402

TASK = {
    "id": "c",
    "levels": [3, 4],
    "expressions": ["20 * 10 - 3 * 4", "20 * 10 - 3 * 4 - 5 * 6"],
    "answers": ["188", "158"],
}


def call(code: str, part: int, right: bool) -> Turn:
    action = Action(text="", tool_calls=(ToolCall(name="python", arguments={"code": code}),))
    info = {"part": part, "part_correct": right}
    return Turn(index=0, prompt_ids=(), completion_ids=(), completion_logprobs=(), text=code, action=action,
                observation="", reward=float(right), invalid=False, state_key=None, info=info)  # fmt: skip


@dataclass
class Played:
    task_id: str
    turns: list[Turn]
    is_infra_failure: bool = False


def test_parts_are_counted_per_step_and_level_and_a_left_out_product_is_told_apart() -> None:
    both = Played("c", [call("print(20 * 10 - 3 * 4)", 0, True), call("print(20 * 10 - 3*4 - 5*6)", 1, True)])
    dropped = Played("c", [call("print(20 * 10 - 3 * 4)", 0, True), call("print(20 * 10 - 5 * 6)", 1, False)])
    lost = Played("c", [], is_infra_failure=True)  # an infrastructure failure counts nowhere
    counts = step_counts(
        [(1, both), (1, dropped), (2, dropped), (2, lost), (3, Played("?", []))], {"c": TASK}, 2
    )
    assert counts[1]["3"] == {"parts": 2, "right": 2, "term_dropped": 0}
    assert counts[1]["4"] == {"parts": 2, "right": 1, "term_dropped": 1}
    assert counts[2]["4"] == {"parts": 1, "right": 0, "term_dropped": 1} and 3 not in counts
    summed = windows(counts, {1: 200.0, 2: 450.0}, [400.0, 800.0])
    assert summed[0]["steps"] == [1] and summed[1]["steps"] == [2]
    assert summed[0]["levels"]["4"]["share_right"] == 0.5 and summed[1]["levels"]["4"]["share_right"] == 0.0
    late = windows(counts, {1: 200.0, 2: 900.0}, [400.0, 800.0])  # past the budget: the last window
    assert late[1]["steps"] == [2]
    table = level_table({"grpo-seed0": {"windows": summed, "heldout": {"3": 1.0}}}, [400.0, 800.0])
    assert "| run | 0-400 L3 | 0-400 L4 | 400-800 L3 | 400-800 L4 | held-out L3 | held-out L4 |" in table
    assert "| grpo-seed0 | 1.00 (2) | 0.50 (2) | 1.00 (1) | 0.00 (1) | 1.000 |  |" in table
