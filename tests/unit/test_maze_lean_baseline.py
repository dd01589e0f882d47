"""`studies/scripts/maze_lean_baseline.py`: a blind mover's success through the maze's own dynamics (pure
logic)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from maze_lean_baseline import last_shares, lean_success  # noqa: E402

OPEN = ["@..G", "....", "....", "...."]  # G three moves right
WALLED = ["@#.G", "....", "....", "...."]  # the wall stops a mover that only goes right


def test_a_mover_that_always_goes_toward_g_wins_and_one_that_never_does_loses() -> None:
    assert lean_success([OPEN], {"right": 1.0}, plays=5, max_steps=10) == 1.0
    assert lean_success([OPEN], {"left": 1.0}, plays=5, max_steps=10) == 0.0
    assert lean_success([WALLED], {"right": 1.0}, plays=5, max_steps=10) == 0.0  # walls are the env's
    assert lean_success([OPEN], {"right": 1.0}, plays=5, max_steps=2) == 0.0  # out of moves first


def test_a_mixed_lean_wins_sometimes_and_is_seeded() -> None:
    shares = {"right": 0.5, "down": 0.5}
    first = lean_success([OPEN], shares, plays=400, max_steps=10)
    assert 0.0 < first < 1.0 and first == lean_success([OPEN], shares, plays=400, max_steps=10)
    assert first == pytest.approx(lean_success([OPEN], shares, plays=400, max_steps=10, seed=1), abs=0.1)


def test_last_shares_reads_the_last_evaluation() -> None:
    steps = {"evaluations": [{"directions": {"up": 1.0}}, {"directions": {"down": 0.4, "left": 0.6}}]}
    assert last_shares(steps) == {"down": 0.4, "left": 0.6}
    assert last_shares({"evaluations": [{"directions": {}}]}) == {}
    assert last_shares({"evaluations": []}) == {}
