"""GiGPO (Group-in-Group Policy Optimization, arXiv 2505.10978): episode term plus a step term over anchors.

    A(i,t) = A^E(i) + step_weight * A^S(i,t)                                     (paper eq. 7)
    A^E(i)   = normalise(R_i over the task group)      — the GRPO term, with `mode` and `episode_stats`
    A^S(i,t) = normalise(R_t over the anchor group)    — R_t = sum_k gamma^(k-t) r_k  (paper eqs. 5-6)

With `step_return="part"` the sum for R_t stops at the end of step t's part (an env boundary, `info[
"context_reset"]`): on a multi-part task whose parts are independent questions, gamma 1 then gives every
step of a part the part's own reward as its return, including the steps before the one the env pays on
(calc pays a part on its submit turn; with `gamma=0` the python call that chose the operands would have
R_t = 0 in every episode and no step term, docs/credit_study.md part 4).

An anchor group is every step of one task group taken in exactly the same state key, repeated visits within
one episode included (docs/credit.md, "GiGPO"). Singleton and all-equal anchor groups give A^S = 0. A `None`
state key never anchors (see `segments.py`).

Optional similarity anchors (`similarity_anchors=True`, for text states): within each task group the
distinct state keys are clustered greedily in order of first appearance; a key joins the first cluster
whose first member has `difflib.SequenceMatcher` ratio >= `similarity_threshold`, else it founds a new
cluster. This loops over distinct keys per group (not over steps) and costs O(U^2) ratio calls per group.

Trees (tree rollouts, docs/credit.md "Trees"): a branch's copied prefix steps and their original are ONE
decision node (`StepBatch.origin`), reached by every trajectory that continues from it. GiGPO groups the
steps taken in one anchor state (Feng et al. 2025, arXiv 2505.10978, sec. 4.2: the step-level group of an
anchor state collects the actions taken from it across the group's trajectories); a prefix step copied into
k branches was taken once, so it enters its anchor group once, as its node, with the node's return

    R_t(node) = mean of R_t over the trajectories through the node          (each trajectory's own R_t)

and every copy gets its node's A^S. The episode term of a node is likewise the mean of A^E over the
trajectories through it (`tree.merge_shared`). At a branch point the state key is the parent's by
construction (`segments.state_ids`), so the siblings' first own steps always share one anchor group.
On a flat batch every step is its own node and this is the paper's estimator unchanged. Several trees
per group (`rollout.tree.trees`): A^E is over all their leaves, and anchor groups span the trees by state
key as for any two episodes (the trees' roots, taken in the one reset state, share an anchor group).

What this is not: a state-key function (envs provide `info["state_key"]`) and not a loss.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import (
    EPISODE_STATS,
    NORM_MODES,
    apply_invalid_penalty,
    check_choice,
    discounted_returns,
    episode_advantages,
    group_normalise,
)
from agentrl.credit.segments import dense_ids, step_state_ids
from agentrl.credit.tree import merge_shared
from agentrl.errors import ConfigError
from agentrl.types import StepBatch

STEP_RETURNS = ("episode", "part")


@dataclass(frozen=True)
class GiGPOConfig:
    """Options of GiGPO.

    gamma:                discount of the step returns R_t used in the anchor-group term.
    step_return:          "episode" (the paper's): R_t sums the rewards to the episode's end; "part": to the
                          end of the step's part (`StepBatch.boundary`, the env's `context_reset` steps), so
                          with gamma 1 every step of a part has that part's own return, wherever in the
                          part the env pays it.
    step_weight:          omega, the weight of the step term (0 gives GRPO with the same `mode`).
    mode:                 "mean_norm" centres; "mean_std_norm" also divides by the unbiased std + 1e-6.
    episode_stats:        "trajectory" or "steps" for the episode term (see `common.episode_advantages`).
    invalid_penalty:      subtracted from the reward of every unparsable step, before returns.
    similarity_anchors:   cluster text state keys by similarity instead of exact equality.
    similarity_threshold: the `difflib.SequenceMatcher` ratio a key needs to join a cluster.
    """

    gamma: float = 0.95
    step_return: Literal["episode", "part"] = "episode"
    step_weight: float = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1
    similarity_anchors: bool = False
    similarity_threshold: float = 0.95

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, NORM_MODES)
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)
        check_choice("step_return", self.step_return, STEP_RETURNS)
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"credit gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.similarity_threshold <= 1.0:
            raise ConfigError(
                f"credit similarity_threshold must be in [0, 1], got {self.similarity_threshold}"
            )


def gigpo(batch: StepBatch, config: GiGPOConfig) -> np.ndarray:
    """[S] float: A^E + step_weight * A^S for every step (see the module docstring)."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    episode_term = merge_shared(episode_advantages(batch, rewards, config.mode, config.episode_stats), batch)
    if config.step_weight == 0.0:
        return episode_term
    # R_t = sum_k gamma^(k-t) r_k (paper eq. 5), then one value per decision node (a tree's shared steps)
    step_returns = merge_shared(
        discounted_returns(batch, rewards, config.gamma, part_stops(batch, config)), batch
    )
    anchors = similarity_anchor_ids(batch, config.similarity_threshold) if config.similarity_anchors else None
    anchors = anchor_ids(batch) if anchors is None else anchors
    if not batch.is_tree:
        step_term = group_normalise(step_returns, anchors, config.mode)  # A^S, paper eq. 6
    else:  # copies stay out of the anchor statistics and take their original's A^S
        originals = ~batch.shared_copy
        step_term = np.zeros(batch.num_steps)
        step_term[originals] = group_normalise(step_returns[originals], anchors[originals], config.mode)
        step_term = step_term[batch.origin]
    return episode_term + config.step_weight * step_term


def part_stops(batch: StepBatch, config: GiGPOConfig) -> np.ndarray | None:
    """The steps a return stops after: None for `step_return="episode"`, else the batch's part boundaries
    (a batch built from records without "boundaries" stops here with what to add)."""
    if config.step_return == "episode":
        return None
    if batch.boundary is None:
        raise ConfigError(
            'credit.options.step_return="part" needs each step\'s part boundary: give every record '
            '"boundaries" (one bool per step, True where the next part starts), or use "episode"'
        )
    return batch.boundary


def anchor_ids(batch: StepBatch) -> np.ndarray:
    """[S] dense int: steps share an id exactly when they share a task group and a state key."""
    return dense_ids(step_state_ids(batch)[0])


def similarity_anchor_ids(batch: StepBatch, threshold: float) -> np.ndarray:
    """[S] dense int: like `anchor_ids`, but distinct keys within a group merged by text similarity."""
    exact = anchor_ids(batch)
    groups = batch.group[batch.episode]
    first_rows = np.unique(exact, return_index=True)[1]
    first_rows.sort()  # deterministic order: first appearance in the batch
    leader_of = np.arange(exact.max(initial=-1) + 1)
    leaders: dict[int, list[tuple[int, str]]] = {}
    for row in first_rows.tolist():
        key = batch.states[row + int(batch.episode[row])]
        if isinstance(key, str):
            clusters = leaders.setdefault(int(groups[row]), [])
            leader_of[exact[row]] = _join_cluster(clusters, int(exact[row]), key, threshold)
    return dense_ids(leader_of[exact])


def _join_cluster(clusters: list[tuple[int, str]], key_id: int, key: str, threshold: float) -> int:
    """The id of the first cluster whose first member is similar enough to `key`; else a new cluster."""
    for leader_id, leader in clusters:
        if difflib.SequenceMatcher(None, leader, key, autojunk=False).ratio() >= threshold:
            return leader_id
    clusters.append((key_id, key))
    return key_id
