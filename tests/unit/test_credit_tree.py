"""Credit on tree rollouts (issue 42, docs/credit.md "Trees"): hand-made golden trees for GiGPO, SALT and
Tree-GRPO, the copy mask, the checks on tree links, and the flat case unchanged.

The golden tree (one group "g"; lower-case letters are actions, upper-case letters state keys):

    t0 (root)              A -a-> B -b-> C -c-> F        rewards 0 0 0   R = 0
    t1 = branch of t0 @1   A -a-> B -x-> S               rewards 0 1     R = 1
    t2 = branch of t0 @1   A -a-> B -y-> E -z-> S        rewards 0 0 1   R = 1
    t3 = branch of t2 @2   A -a-> B -y-> E -w-> F        rewards 0 0 0   R = 0
    t4 (independent)       A -d-> G -e-> F               rewards 0 0     R = 0

Decision nodes: (A,a) is ONE node reached by t0..t3 (its copies are t1, t2, t3 step 0); (B,y) one node
reached by t2, t3 (its copy is t3 step 1). At B the siblings are (B,b), (B,x), (B,y); at E (B,y)'s
successors (E,z), (E,w).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from agentrl.credit import (
    ESTIMATORS,
    copies_by_episode,
    episodes_to_batch,
    estimate,
    estimate_records,
    records_to_batch,
)
from agentrl.errors import ConfigError
from agentrl.types import Action, Episode, Turn


def record(states: str, actions: str, rewards: list[float], **extra: Any) -> dict[str, Any]:
    return {"group": "g", "states": list(states), "actions": list(actions), "rewards": rewards, **extra}


TREE = [
    record("ABCF", "abc", [0.0, 0.0, 0.0]),
    record("ABS", "ax", [0.0, 1.0], parent=0, branch_turn=1),
    record("ABES", "ayz", [0.0, 0.0, 1.0], parent=0, branch_turn=1),
    record("ABEF", "ayw", [0.0, 0.0, 0.0], parent=2, branch_turn=2),
    record("AGF", "de", [0.0, 0.0]),
]

# GRPO over the five trajectories, returns 0 1 1 0 0: mean 0.4, unbiased std sqrt(1.2 / 4)
STD = math.sqrt(1.2 / 4) + 1e-6
LOSE, WIN = -0.4 / STD, 0.6 / STD
SHARED_A = (LOSE + WIN + WIN + LOSE) / 4  # (A,a): the mean over t0..t3
SHARED_Y = (WIN + LOSE) / 2  # (B,y): the mean over t2, t3


def test_the_copies_are_marked_and_point_at_their_original() -> None:
    batch = records_to_batch(TREE)
    # rows: t0 0-2, t1 3-4, t2 5-7, t3 8-10, t4 11-12
    assert batch.shared_copy.tolist() == [0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0]
    assert batch.origin[[3, 5, 8, 9]].tolist() == [0, 0, 0, 6]
    assert batch.parent is not None and batch.parent.tolist() == [-1, 0, 0, 2, -1]
    assert batch.branch_step is not None and batch.branch_step.tolist() == [0, 1, 1, 2, 0]
    flat = records_to_batch(
        [{k: v for k, v in r.items() if k not in ("parent", "branch_turn")} for r in TREE]
    )
    assert flat.parent is None and not flat.shared_copy.any() and not flat.is_tree


def test_gigpo_counts_a_shared_prefix_step_once_in_its_anchor_group() -> None:
    """gamma 1, mean_norm, omega 1. A^E = R - 0.4, merged per node: (A,a) and (B,y) get 0.1.
    Node returns: (A,a) mean(0, 1, 1, 0) = 0.5, (B,y) mean(1, 0) = 0.5. Anchor A: (A,a) 0.5 and (A,d) 0 ->
    +-0.25 (not the five copies 0 1 1 0 0); B: 0, 1, 0.5 -> -0.5, +0.5, 0; E: 1, 0 -> +-0.5; C, G alone."""
    advantages = estimate_records("gigpo", TREE, gamma=1.0, mode="mean_norm")
    assert advantages[0] == pytest.approx([0.35, -0.9, -0.4])
    assert advantages[1] == pytest.approx([0.35, 1.1])
    assert advantages[2] == pytest.approx([0.35, 0.1, 1.1])
    assert advantages[3] == pytest.approx([0.35, 0.1, -0.9])
    assert advantages[4] == pytest.approx([-0.65, -0.4])


def test_gigpo_anchors_the_branch_points_by_the_links_when_the_env_has_no_state_keys() -> None:
    """All keys None: only the links share states. (A,a) is alone in its anchor group now (t4's None start
    is its own), B and E still hold the siblings; the rest as above."""
    blind = [{**r, "states": [None] * len(r["states"])} for r in TREE]
    advantages = estimate_records("gigpo", blind, gamma=1.0, mode="mean_norm")
    assert advantages[0] == pytest.approx([0.1, -0.9, -0.4])
    assert advantages[1] == pytest.approx([0.1, 1.1])
    assert advantages[2] == pytest.approx([0.1, 0.1, 1.1])
    assert advantages[3] == pytest.approx([0.1, 0.1, -0.9])
    assert advantages[4] == pytest.approx([-0.4, -0.4])
    unlinked = [{k: v for k, v in r.items() if k not in ("parent", "branch_turn")} for r in blind]
    assert estimate_records("gigpo", unlinked, gamma=1.0, mode="mean_norm") == estimate_records(
        "drgrpo", unlinked
    )  # without links and keys nothing anchors: the episode term alone


@pytest.mark.parametrize("keys", ["keyed", "none"])
def test_salt_merges_the_shared_prefix_exactly(keys: str) -> None:
    """GRPO base; (A,a) is one node of four trajectories, (B,y) of two; every other transition is unique.
    With None keys nothing would merge without the links."""
    records = TREE if keys == "keyed" else [{**r, "states": [None] * len(r["states"])} for r in TREE]
    advantages = estimate_records("salt", records)
    assert advantages[0] == pytest.approx([SHARED_A, LOSE, LOSE])
    assert advantages[1] == pytest.approx([SHARED_A, WIN])
    assert advantages[2] == pytest.approx([SHARED_A, SHARED_Y, WIN])
    assert advantages[3] == pytest.approx([SHARED_A, SHARED_Y, LOSE])
    assert advantages[4] == pytest.approx([LOSE, LOSE])


def test_tree_grpo_as_the_paper_adds_grpo_within_each_tree_to_grpo_across_trees() -> None:
    """intra="tree" (the default; AMAP-ML/Tree-GRPO's adv_estimator "tree"). Group term as below. Tree term:
    GRPO over the returns of each tree's trajectories: t0..t3 (0 1 1 0) -> mean 0.5, unbiased std
    sqrt(1/3) -> -k +k +k -k with k = 0.5 / (sqrt(1/3) + 1e-6); t4 is a tree of one -> 0. A shared node gets
    the mean over its trajectories: (A,a) over t0..t3 -> 0, (B,y) over t2, t3 -> 0."""
    k = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    advantages = estimate_records("tree_grpo", TREE)
    assert advantages[0] == pytest.approx([SHARED_A, LOSE - k, LOSE - k])
    assert advantages[1] == pytest.approx([SHARED_A, WIN + k])
    assert advantages[2] == pytest.approx([SHARED_A, SHARED_Y, WIN + k])
    assert advantages[3] == pytest.approx([SHARED_A, SHARED_Y, LOSE - k])
    assert advantages[4] == pytest.approx([LOSE, LOSE])
    assert estimate_records("tree_grpo", TREE, intra="tree") == advantages
    with pytest.raises(ConfigError, match="intra"):
        estimate_records("tree_grpo", TREE, intra="leaves")


def test_tree_grpo_compares_each_branch_with_its_siblings() -> None:
    """intra="siblings". Group term: GRPO, merged per node. Sibling term (mean_std_norm, unbiased): at B
    the values V(B,b) = 0, V(B,x) = 1, V(B,y) = mean(1, 0) = 0.5 -> mean 0.5, std 0.5 -> -1, +1, 0; at E 1
    and 0 -> +-0.5 / 0.707107. (C,c) follows (B,b) alone and inherits its -1. (A,a), t4: no branching node
    -> 0."""
    one = 0.5 / (0.5 + 1e-6)
    half = 0.5 / (math.sqrt(0.5) + 1e-6)
    advantages = estimate_records("tree_grpo", TREE, intra="siblings")
    assert advantages[0] == pytest.approx([SHARED_A, LOSE - one, LOSE - one])
    assert advantages[1] == pytest.approx([SHARED_A, WIN + one])
    assert advantages[2] == pytest.approx([SHARED_A, SHARED_Y, WIN + half])
    assert advantages[3] == pytest.approx([SHARED_A, SHARED_Y, LOSE - half])
    assert advantages[4] == pytest.approx([LOSE, LOSE])
    no_intra = estimate_records("tree_grpo", TREE, intra="siblings", intra_weight=0.0)
    assert no_intra[0] == pytest.approx([SHARED_A, LOSE, LOSE])


def test_tree_grpo_branching_at_turn_zero_compares_the_first_steps() -> None:
    """Two branches from the start (branch_turn 0): the three first steps are siblings; nothing is copied."""
    records = [record("AB", "a", [1.0]), record("AC", "b", [0.0], parent=0, branch_turn=0)]
    records.append(record("AD", "c", [0.0], parent=0, branch_turn=0))
    assert not records_to_batch(records).shared_copy.any()
    grpo = estimate_records("grpo", records)
    tree = estimate_records("tree_grpo", records)
    assert [t[0] - g[0] for t, g in zip(tree, grpo, strict=True)] == pytest.approx([g[0] for g in grpo])


def random_flat_records(rng: np.random.Generator) -> list[dict[str, Any]]:
    records = []
    for group in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(1, 6))):
            steps = int(rng.integers(1, 5))
            records.append(
                {
                    "group": group,
                    "states": [str(s) for s in rng.integers(0, 3, steps + 1)],
                    "actions": [str(a) for a in rng.integers(0, 2, steps)],
                    "rewards": rng.integers(0, 2, steps).astype(float).tolist(),
                    "valid": (rng.random(steps) > 0.2).tolist(),
                }
            )
    return records


@pytest.mark.parametrize("seed", range(20))
def test_tree_grpo_is_grpo_on_a_flat_group(seed: int) -> None:
    records = random_flat_records(np.random.default_rng(seed))
    for options in ({}, {"mode": "mean_norm"}, {"episode_stats": "steps"}):
        assert estimate_records("tree_grpo", records, **options) == estimate_records(
            "grpo", records, **options
        )


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_gives_a_copy_its_originals_advantage(name: str) -> None:
    records = [{**r, "answer_probs": [0.5] * len(r["rewards"])} for r in TREE]
    batch = records_to_batch(records)
    values = estimate(name, batch)
    np.testing.assert_array_equal(values, values[batch.origin])


def turn(index: int, reward: float, key: str) -> Turn:
    return Turn(index, (1,), (2,), (0.0,), "m", Action("m"), "o", reward, False, key)


def test_episodes_to_batch_reads_the_parent_links() -> None:
    root = Episode("r", "maze", "t", "g", 0, (turn(0, 0.0, "B"), turn(1, 0.0, "F")), "terminated", "A")
    branch = Episode(
        "b", "maze", "t", "g", 0, (turn(0, 0.0, "B"), turn(1, 1.0, "S")), "terminated", "A", parent_id="r",
        branch_turn=1,
    )  # fmt: skip
    orphan = Episode("o", "maze", "t", "g", 0, (turn(0, 0.0, "B"),), "terminated", "A", parent_id="gone",
                     branch_turn=1)  # fmt: skip
    batch = episodes_to_batch([root, branch, orphan])
    assert batch.parent is not None and batch.parent.tolist() == [-1, 0, -1]  # a missing parent: a root
    assert batch.shared_copy.tolist() == [False, False, True, False, False]
    assert copies_by_episode(batch) == [[False, False], [True, False], [False]]
    assert not episodes_to_batch([root]).is_tree


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parent": 9}, "index of another record"),
        ({"parent": 1}, "index of another record"),
        ({"group": "h"}, "parent's group"),
        ({"branch_turn": 3}, "branch_turn must be in 0..2"),
        ({"rewards": [0.5, 1.0]}, "must be copies"),
        ({"states": ["A", "X", "S"]}, "must be copies"),
    ],
)
def test_bad_tree_links_are_config_errors(change: dict[str, Any], message: str) -> None:
    records = [TREE[0], {**TREE[1], **change}]
    with pytest.raises(ConfigError, match=message):
        records_to_batch(records)


def test_a_cycle_of_parents_is_a_config_error() -> None:
    records = [
        record("AB", "a", [0.0], parent=1, branch_turn=1),
        record("AB", "a", [0.0], parent=0, branch_turn=1),
    ]
    with pytest.raises(ConfigError, match="cycle"):
        records_to_batch(records)


@pytest.mark.parametrize("name", ["grpo", "gigpo", "salt", "tree_grpo"])
def test_a_root_prefix_that_every_leaf_shares_gets_no_advantage(name: str) -> None:
    """One tree per group (as `play_tree` grows it): the turns before the first branch are reached by every
    trajectory, so no group-relative estimator can credit them (docs/tree_rollouts.md, "The runner")."""
    tree = [
        record("ABC", "ab", [0.0, 0.0]),
        record("ABD", "ax", [0.0, 1.0], parent=0, branch_turn=1),
        record("ABE", "ay", [0.0, 1.0], parent=0, branch_turn=1),
        record("ABF", "az", [0.0, 0.0], parent=0, branch_turn=1),
    ]
    advantages = estimate_records(name, tree)
    assert [steps[0] for steps in advantages] == pytest.approx([0.0] * 4, abs=1e-9)
    assert any(abs(steps[1]) > 0.5 for steps in advantages)  # the branches' own turns are credited
