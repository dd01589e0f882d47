"""The step metrics of tree rollouts (`agentrl.trainer.run.tree_metrics`): forks, branch turns, the copied
share of the turns and, on entropy, how the branch points fired, each branch point counted once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from test_tree_entropy import EntropyEngine, by_turn, entropy_config, play

from agentrl.trainer.run import entropy_branch_points, tree_metrics
from agentrl.types import Action, Episode, Turn

TREE_KEYS = {"tree/forks", "tree/branch_turn_mean", "tree/copied_turn_share"}
ENTROPY_KEYS = {"tree/entropy_fired_share", "tree/branch_entropy_rise_mean"}
Marks = Mapping[int, Mapping[str, Any]]  # turn -> the info of a branch point recorded on it


def turn(index: int, info: Mapping[str, Any] | None = None) -> Turn:
    return Turn(index, (1,), (2,), (-0.1,), "t", Action("t"), "obs", 0.0, False, None, info=info or {})


def root(episode_id: str, turns: int, marks: Marks | None = None) -> Episode:
    """An episode played from the task's start; `marks`: the info of its turns that are branch points."""
    marks = marks or {}
    played = tuple(turn(index, marks.get(index)) for index in range(turns))
    return Episode(episode_id, "env", "task", "g", 0, played, "terminated")


def branch(parent: Episode, episode_id: str, at: int, turns: int, marks: Marks | None = None) -> Episode:
    """A fork of `parent` at turn `at`, as the runner records it: the parent's first `at` turns copied, then
    its own up to `turns` in all (`marks` as in `root`)."""
    marks = marks or {}
    own = tuple(turn(index, marks.get(index)) for index in range(at, turns))
    played = parent.turns[:at] + own
    return replace(parent, episode_id=episode_id, turns=played, parent_id=parent.episode_id, branch_turn=at)


def point(entropy: float, initial: float, fallback: bool) -> dict[str, Any]:
    return {"branch_entropy": entropy, "branch_entropy_initial": initial, "branch_fallback": fallback}


def failed(episode: Episode) -> Episode:
    return replace(episode, stop_reason="infra_error", error="session lost")


def test_flat_groups_have_no_tree_metrics() -> None:
    assert tree_metrics([root("a", 3), root("b", 4)]) == {}
    assert tree_metrics([failed(root("trunk", 2))]) == {}  # a tree whose trunk failed: one flat episode
    assert tree_metrics([]) == {}


def test_a_tree_branching_at_a_fixed_turn() -> None:
    # width 3 at turn 1: the root plays 4 turns, one fork 3 more, the other 2 more before it ends
    trunk = root("a", 4)
    metrics = tree_metrics([trunk, branch(trunk, "b", 1, 4), branch(trunk, "c", 1, 3)])
    assert metrics == {
        "tree/forks": 2.0,
        "tree/branch_turn_mean": 1.0,
        "tree/copied_turn_share": pytest.approx(2 / 11),
    }


def test_a_nested_tree_counts_every_fork_at_its_own_branch_turn() -> None:
    # width 2 at turns 1 and 3: a forks b at 1, then c at 3; b forks d at 3 (d's turn 0 is a copy of a copy)
    a = root("a", 5)
    b = branch(a, "b", 1, 5)
    episodes = [a, branch(a, "c", 3, 5), b, branch(b, "d", 3, 5)]
    metrics = tree_metrics(episodes)
    assert set(metrics) == TREE_KEYS
    assert metrics["tree/forks"] == 3.0
    assert metrics["tree/branch_turn_mean"] == pytest.approx((1 + 3 + 3) / 3)
    assert metrics["tree/copied_turn_share"] == pytest.approx((1 + 3 + 3) / 20)


def test_an_entropy_tree_counts_each_branch_point_once() -> None:
    # a's first point fires at turn 1 (rise 0.5) and forks b, which ends before its window; a's second point
    # falls back at turn 3 (rise -0.1) and forks c, which holds turn 1's record as a copy
    fired, fallback = point(6.0, 5.5, False), point(5.4, 5.5, True)
    a = root("a", 5, {1: fired, 3: fallback})
    episodes = [a, branch(a, "c", 3, 5, {3: fallback}), branch(a, "b", 1, 3, {1: fired})]
    assert len(entropy_branch_points(episodes)) == 2
    metrics = tree_metrics(episodes)
    assert set(metrics) == TREE_KEYS | ENTROPY_KEYS
    assert metrics["tree/forks"] == 2.0 and metrics["tree/branch_turn_mean"] == 2.0
    assert metrics["tree/copied_turn_share"] == pytest.approx(4 / 13)
    assert metrics["tree/entropy_fired_share"] == 0.5
    assert metrics["tree/branch_entropy_rise_mean"] == pytest.approx((0.5 - 0.1) / 2)


def test_a_failed_branch_still_counts_its_fork_and_its_branch_point() -> None:
    # the fork failed before it played its own turn 2: only the branch that went on records the point;
    # the fork's copied turns are in the share (the env played them once, in the root)
    mark = point(1.2, 1.0, True)
    trunk = root("a", 4, {2: mark})
    episodes = [trunk, failed(branch(trunk, "b", 2, 2))]
    metrics = tree_metrics(episodes)
    assert metrics == {
        "tree/forks": 1.0,
        "tree/branch_turn_mean": 2.0,
        "tree/copied_turn_share": pytest.approx(2 / 6),
        "tree/entropy_fired_share": 0.0,
        "tree/branch_entropy_rise_mean": pytest.approx(0.2),
    }
    # and a fork that recorded it while the branch that went on failed before its turn 2 counts it once
    lost = failed(replace(trunk, turns=trunk.turns[:2]))
    assert entropy_branch_points([lost, branch(trunk, "b", 2, 4, {2: mark})]) == [mark]


def test_a_played_entropy_tree_has_three_branch_points_per_two_levels() -> None:
    # `play_tree` on entropy (test_tree_entropy): the first point fires at turn 2 on a rise of 2.0, both
    # second points fall back at turn 4 (no rise); turn 2's record is in all four leaves, copied in two
    engine = EntropyEngine(by_turn(1.0, 1.0, 3.0, 1.0, 1.0))
    leaves = play(entropy_config(max_turns=5, branch_points=2, entropy_threshold=1.0), engine, width=2)
    metrics = tree_metrics(leaves)
    assert metrics["tree/forks"] == 3.0
    assert metrics["tree/branch_turn_mean"] == pytest.approx((4 + 2 + 4) / 3)
    assert metrics["tree/copied_turn_share"] == pytest.approx((4 + 2 + 4) / 20)
    assert metrics["tree/entropy_fired_share"] == pytest.approx(1 / 3)
    assert metrics["tree/branch_entropy_rise_mean"] == pytest.approx(2 / 3)
