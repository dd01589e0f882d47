"""`studies/scripts/calc_chain_gonogo.py`'s pure parts: per-part outcomes, their summary, the advantage
comparison."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from calc_chain_gonogo import (  # noqa: E402
    best_decoding,
    compare_advantages,
    part_outcomes,
    part_start_signal,
    returns_to_go_at_part_starts,
    success_summary,
)


def test_a_part_is_right_only_if_its_submit_was() -> None:
    turns = [SimpleNamespace(info=info) for info in ({"part": 0, "part_correct": True}, {"part": 1},
                                                      {"part": 1, "part_correct": False})]  # fmt: skip
    assert part_outcomes(SimpleNamespace(turns=turns), 3) == [True, False, False]


def test_the_summary_counts_parts_by_index_and_form() -> None:
    rows = [
        {"forms": ["words", "reversed"], "parts_correct": [True, False], "turns": 4, "invalid_turns": 1,
         "infra_failure": False},
        {"forms": ["reversed", "words"], "parts_correct": [True, True], "turns": 4, "invalid_turns": 0,
         "infra_failure": False},
        {"forms": ["words", "words"], "parts_correct": [False, False], "turns": 1, "invalid_turns": 1,
         "infra_failure": True},
    ]  # fmt: skip
    summary = success_summary(rows)
    assert summary["per_part_success"] == 0.75 and summary["by_part_index"] == [1.0, 0.5]
    assert summary["by_form"]["reversed"] == {"success": 0.5, "n": 2} and summary["infra_failures"] == 1
    assert summary["all_parts_success"] == 0.5 and summary["invalid_turn_rate"] == pytest.approx(1 / 8)


def test_the_comparison_sees_collinear_and_opposite_vectors() -> None:
    same = compare_advantages(np.array([1.0, -1.0, 0.5]), np.array([2.0, -2.0, 1.0]))
    assert same["cosine"] == pytest.approx(1.0) and same["sign_differs"] == 0.0
    flipped = compare_advantages(np.array([1.0, -1.0, 0.0]), np.array([1.0, 1.0, 0.0]))
    assert flipped["sign_differs"] == 0.5 and flipped["turns_compared"] == 2


def test_the_best_decoding_prefers_the_lower_temperature_on_a_tie() -> None:
    evaluations = [
        {"temperature": 0.7, "per_part_success": 0.4},
        {"temperature": 0.0, "per_part_success": 0.4},
    ]
    assert best_decoding(evaluations) == {"temperature": 0.0, "per_part_success": 0.4}


def _episode(group: str, turns: list[tuple[int, float]]) -> SimpleNamespace:
    """A fake episode of (part, reward) turns: pure logic, no model or env."""
    steps = [SimpleNamespace(info={"part": part}, reward=reward) for part, reward in turns]
    return SimpleNamespace(group_id=group, turns=steps)


def test_returns_to_go_start_at_each_later_parts_first_turn() -> None:
    episode = _episode("g", [(0, 0.0), (0, 1.0), (1, 0.0), (1, 0.0), (2, 1.0)])
    assert returns_to_go_at_part_starts(episode, 3) == {1: 1.0, 2: 1.0}
    assert returns_to_go_at_part_starts(_episode("g", [(0, 1.0)]), 3) == {}  # never reached part 1


def test_part_start_signal_ignores_earlier_luck_and_counts_unequal_anchor_groups() -> None:
    episodes = [
        _episode("a", [(0, 1.0), (1, 0.0), (2, 1.0)]),
        _episode("a", [(0, 0.0), (1, 0.0), (2, 1.0)]),  # part 0 differs, parts 1-2 the same: no signal
        _episode("b", [(0, 0.0), (1, 1.0), (2, 0.0)]),
        _episode("b", [(0, 0.0), (1, 0.0), (2, 0.0)]),
        _episode("c", [(0, 0.0), (1, 0.0), (2, 0.0)]),  # alone in its group: not an anchor group
    ]
    signal = part_start_signal(episodes, 3)
    assert signal["anchor_groups"] == 4 and signal["with_signal"] == 1
    assert signal["by_part"] == {
        "1": {"anchor_groups": 2, "with_signal": 1},
        "2": {"anchor_groups": 2, "with_signal": 0},
    }
