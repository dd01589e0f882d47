"""`studies/scripts/credit_study_report.py`'s move quality on hand-made maze turns and its kept-runs table
(pure logic, no store)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from credit_study_report import (  # noqa: E402
    Turn,
    advantage_sum,
    direction_shares,
    distance_to_goal,
    made_progress,
    markdown_table,
    move_quality,
    run_row,
)

LAYOUT = ["@.#.", "..#G", "....", "...."]  # the wall column forces the path down and around
LEGEND = "Move @ to G. # is a wall.\n"


def board(row: int, column: int) -> str:
    rows = [list(r.replace("@", ".")) for r in LAYOUT]
    rows[row][column] = "@"
    return "\n".join("".join(r) for r in rows)


def turn(before: str, after: str, invalid: bool = False) -> Turn:
    return Turn(1, "eval", 0, "t", before, after, invalid, None)


def test_distance_is_the_bfs_path_around_walls() -> None:
    assert distance_to_goal(LAYOUT, (0, 0)) == 6  # down 2, right 3, up 1
    assert distance_to_goal(LAYOUT, (0, 1)) == 5
    assert distance_to_goal(LAYOUT, (1, 3)) == 0


def test_only_moves_that_shorten_the_path_are_progress() -> None:
    start = LEGEND + board(0, 0)
    assert made_progress(turn(start, board(1, 0)), LAYOUT)  # down: 6 -> 5
    assert made_progress(turn(start, board(0, 1)), LAYOUT)  # right: 6 -> 5 as well
    assert not made_progress(turn(start, board(0, 0)), LAYOUT)  # a bump into the edge
    assert not made_progress(turn(board(0, 1), board(0, 0)), LAYOUT)  # away from the goal
    assert not made_progress(turn(start, "Invalid. Call move...\n" + board(0, 0), invalid=True), LAYOUT)
    reached = "You reached G!\n" + board(1, 3).replace("G", ".")
    assert made_progress(turn(board(2, 3), reached), LAYOUT)


def test_move_quality_counts_invalid_turns_as_no_progress_and_each_first_turn_once() -> None:
    turns = [
        turn(LEGEND + board(0, 0), board(1, 0)),
        turn(board(1, 0), board(1, 0)),
        turn(board(1, 0), board(1, 0), invalid=True),
        turn(board(1, 0), board(2, 0)),
    ]
    second = Turn(2, "eval", 0, "t", LEGEND + board(0, 0), board(0, 0), False, None)  # a bump first
    quality = move_quality([*turns, second], {"t": LAYOUT})
    assert quality == {
        "turns": 5.0,
        "progress_rate": 2 / 5,
        "progress_rate_valid": 2 / 4,
        "first_turn_progress_rate": 1 / 2,
    }


def test_direction_shares_are_over_the_valid_moves() -> None:
    turns = [
        Turn(1, "eval", 0, "t", "", "", False, None, "right"),
        Turn(1, "eval", 0, "t", "", "", False, None, "right"),
        Turn(1, "eval", 0, "t", "", "", False, None, "up"),
        Turn(1, "eval", 0, "t", "", "", True, None, None),
    ]
    assert direction_shares(turns) == {"up": 0.3333, "down": 0.0, "left": 0.0, "right": 0.6667}
    assert direction_shares(turns[3:]) == {}


def test_a_kept_runs_table_row_reads_its_summary_and_steps() -> None:
    summary = {
        "result": {
            "curve": [
                {"success_rate": 0.1, "episodes": 60},
                {"success_rate": 0.2, "episodes": 60},
            ]
        }
    }
    steps = {
        "updates": [
            {"success_rate": 0.25, "invalid_turn_rate": 0.0, "zero_variance_groups": 0.5},
            {"success_rate": 0.0, "invalid_turn_rate": 0.5, "zero_variance_groups": 1.0, "kl": 0.02},
            {"success_rate": 0.5, "invalid_turn_rate": None, "zero_variance_groups": 0.0, "kl": 0.01},
        ],
        "evaluations": [
            {"progress_rate": 0.1, "first_turn_progress_rate": 0.3, "directions": {"down": 1.0}},
            {
                "progress_rate": 0.2,
                "first_turn_progress_rate": 0.4,
                "directions": {"down": 0.5, "right": 0.4},
            },
        ],
    }
    row = run_row("grpo-seed1", summary, steps)
    assert row["held_out"] == [6, 12] and row["eval_tasks"] == 60
    assert row["train_success"] == 0.25 and row["invalid_turns"] == 0.25 and row["worst_invalid"] == 0.5
    assert row["zero_variance_groups"] == 0.5 and row["max_kl"] == 0.02
    assert (row["progress"], row["first_move_progress"]) == (0.2, 0.4)  # the last evaluation
    table = markdown_table([row]).splitlines()
    assert len(table) == 3 and table[2].startswith("| grpo-seed1 | 6 / 12 (of 60) | 0.250 | 0.250 | 0.500 |")
    assert table[2].endswith("|  / 0.500 /  / 0.400 |")  # up / down / left / right; absent moves blank


def test_advantage_sums_split_valid_from_invalid_turns() -> None:
    turns = [
        Turn(1, "train", 3, "t", "", "", False, -0.5),
        Turn(1, "train", 3, "t", "", "", False, -0.5),
        Turn(2, "train", 3, "t", "", "", False, 1.5),
        Turn(3, "train", 3, "t", "", "", True, -1.0),
        Turn(3, "train", 3, "t", "", "", False, None),  # not trained on: no advantage
    ]
    assert advantage_sum(turns, invalid=False) == 0.5 and advantage_sum(turns, invalid=True) == -1.0
