"""Credit on a group of several trees (issue 42, `rollout.tree.trees`): hand-made golden groups of M = 2
trees for GRPO, Tree-GRPO, GiGPO and SALT. One tree per group is tests/unit/test_credit_tree.py (unchanged).

The golden group (one group "g"; lower-case letters are actions, upper-case letters state keys), two trees
of width 2 branching at turn 1, both from the same reset (state A):

    r1 (root of tree 1)    A -a-> B -b-> C      rewards 0 1   R = 1
    u1 = branch of r1 @1   A -a-> B -c-> D      rewards 0 1   R = 1
    r2 (root of tree 2)    A -d-> E -e-> F      rewards 0 0   R = 0
    u2 = branch of r2 @1   A -d-> E -f-> G      rewards 0 1   R = 1

GRPO over the four trajectories: mean 0.75, unbiased std sqrt(0.75 / 3) = 0.5, so A = +0.5, +0.5, -1.5,
+0.5 (up to the 1e-6 in the std). Each tree's root prefix (its turn 0) is one decision node reached by its
two trajectories; with one tree per group it would get 0, here the trees are compared: (A,a) gets the mean
over r1, u1 and (A,d) the mean over r2, u2.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from agentrl.credit import estimate, estimate_records, records_to_batch
from agentrl.credit.tree import tree_of


def record(states: str, actions: str, rewards: list[float], **extra: Any) -> dict[str, Any]:
    return {"group": "g", "states": list(states), "actions": list(actions), "rewards": rewards, **extra}


TREES = [
    record("ABC", "ab", [0.0, 1.0]),
    record("ABD", "ac", [0.0, 1.0], parent=0, branch_turn=1),
    record("AEF", "de", [0.0, 0.0]),
    record("AEG", "df", [0.0, 1.0], parent=2, branch_turn=1),
]

STD = 0.5 + 1e-6
WIN, LOSE = 0.25 / STD, -0.75 / STD  # GRPO: +0.5, -1.5
TREE_1, TREE_2 = WIN, (LOSE + WIN) / 2  # the root prefixes: +0.5, -0.5


def test_two_trees_are_one_group_with_links_within_each_tree() -> None:
    batch = records_to_batch(TREES)
    assert batch.group.tolist() == [0, 0, 0, 0]
    assert tree_of(batch).tolist() == [0, 0, 2, 2]
    assert batch.shared_copy.tolist() == [False, False, True, False, False, False, True, False]
    assert batch.origin[[2, 6]].tolist() == [0, 4]  # each copy points into its own tree


def test_grpo_credits_each_trees_root_prefix_against_the_other_tree() -> None:
    advantages = estimate_records("grpo", TREES)
    assert advantages[0] == pytest.approx([TREE_1, WIN])
    assert advantages[1] == pytest.approx([TREE_1, WIN])
    assert advantages[2] == pytest.approx([TREE_2, LOSE])
    assert advantages[3] == pytest.approx([TREE_2, WIN])
    assert TREE_1 == pytest.approx(0.5, abs=1e-5) and TREE_2 == pytest.approx(-0.5, abs=1e-5)


def test_tree_grpo_adds_the_sibling_term_within_each_tree_to_the_group_term_across_trees() -> None:
    """Group term: GRPO over all four leaves, merged per node (the root prefixes as above). Sibling term
    (mean_std_norm, unbiased): tree 1 at B compares V(B,b) = 1 with V(B,c) = 1 -> 0, 0; tree 2 at E compares
    V(E,e) = 0 with V(E,f) = 1 -> -+0.5 / 0.707107. Each tree's start has one successor (its root's turn 0),
    so the root prefixes get the group term alone: the trees compare there through it (Ji et al. 2025's
    inter-tree term), never against each other's siblings."""
    half = 0.5 / (math.sqrt(0.5) + 1e-6)
    advantages = estimate_records("tree_grpo", TREES)
    assert advantages[0] == pytest.approx([TREE_1, WIN])
    assert advantages[1] == pytest.approx([TREE_1, WIN])
    assert advantages[2] == pytest.approx([TREE_2, LOSE - half])
    assert advantages[3] == pytest.approx([TREE_2, WIN + half])


def test_gigpo_anchors_the_trees_roots_in_their_shared_start_state() -> None:
    """gamma 1, mean_norm, omega 1. A^E = R - 0.75, merged per node: (A,a) 0.25, (A,d) mean(-0.75, 0.25) =
    -0.25. Anchor A (both trees reset to it): nodes (A,a) with R = mean(1, 1) = 1 and (A,d) with mean(0, 1)
    = 0.5 -> +-0.25. Anchor B: 1, 1 -> 0, 0. Anchor E: 0, 1 -> -+0.5."""
    advantages = estimate_records("gigpo", TREES, gamma=1.0, mode="mean_norm")
    assert advantages[0] == pytest.approx([0.5, 0.25])
    assert advantages[1] == pytest.approx([0.5, 0.25])
    assert advantages[2] == pytest.approx([-0.5, -1.25])
    assert advantages[3] == pytest.approx([-0.5, 0.75])


def test_salt_keeps_different_root_prefixes_apart() -> None:
    """(A,a,B) is one node of r1 and its copy in u1, (A,d,E) of r2 and u2: each the mean of its tree's GRPO
    advantages; the second steps are unique transitions and keep their own."""
    advantages = estimate_records("salt", TREES)
    assert advantages[0] == pytest.approx([TREE_1, WIN])
    assert advantages[2] == pytest.approx([TREE_2, LOSE])
    assert advantages[3] == pytest.approx([TREE_2, WIN])


SAME_ROOTS = [
    record("ABC", "ab", [0.0, 1.0]),
    record("ABD", "ac", [0.0, 1.0], parent=0, branch_turn=1),
    record("ABF", "ae", [0.0, 0.0]),
    record("ABG", "af", [0.0, 1.0], parent=2, branch_turn=1),
]


def test_salt_merges_identical_root_prefixes_across_trees() -> None:
    """Both trees took (A,a,B) first: by the state keys that is one transition of four occurrences (two
    originals, two copies), whose GRPO advantages sum to 0; the second steps keep theirs."""
    advantages = estimate_records("salt", SAME_ROOTS)
    assert [steps[0] for steps in advantages] == pytest.approx([0.0] * 4, abs=1e-9)
    assert [steps[1] for steps in advantages] == pytest.approx([WIN, WIN, LOSE, WIN])


def test_gigpo_puts_every_trees_siblings_in_one_anchor_when_the_trees_meet_a_state() -> None:
    """Both trees reach B after (A,a): anchor A holds the two root nodes (R 1 and 0.5: +-0.25, as any two
    steps in one state would be), anchor B all four branches (1, 1, 0, 1: mean 0.75)."""
    advantages = estimate_records("gigpo", SAME_ROOTS, gamma=1.0, mode="mean_norm")
    assert advantages[0] == pytest.approx([0.5, 0.5])
    assert advantages[1] == pytest.approx([0.5, 0.5])
    assert advantages[2] == pytest.approx([-0.5, -1.5])
    assert advantages[3] == pytest.approx([-0.5, 0.5])


@pytest.mark.parametrize("name", ["grpo", "gigpo", "salt", "tree_grpo"])
def test_the_root_prefix_of_a_lone_tree_still_gets_nothing(name: str) -> None:
    """The same four leaves as one tree of width 4 (`trees: 1`): the root prefix is every leaf's."""
    one_tree = [
        record("ABC", "ab", [0.0, 1.0]),
        record("ABD", "ac", [0.0, 1.0], parent=0, branch_turn=1),
        record("ABF", "ae", [0.0, 0.0], parent=0, branch_turn=1),
        record("ABG", "af", [0.0, 1.0], parent=0, branch_turn=1),
    ]
    advantages = estimate_records(name, one_tree)
    assert [steps[0] for steps in advantages] == pytest.approx([0.0] * 4, abs=1e-9)


@pytest.mark.parametrize("name", ["grpo", "gigpo", "salt", "tree_grpo", "rloo", "drgrpo"])
def test_every_copy_takes_its_originals_advantage_across_trees(name: str) -> None:
    batch = records_to_batch(TREES)
    values = estimate(name, batch)
    np.testing.assert_array_equal(values, values[batch.origin])
