"""GiGPO (Group-in-Group Policy Optimization, arXiv 2505.10978): episode term plus a step term over anchors.

    A(i,t) = A^E(i) + step_weight * A^S(i,t)                                     (paper eq. 7)
    A^E(i)   = normalise(R_i over the task group)      — the GRPO term, with `mode` and `episode_stats`
    A^S(i,t) = normalise(R_t over the anchor group)    — R_t = sum_k gamma^(k-t) r_k  (paper eqs. 5-6)

An anchor group is every step of one task group taken in exactly the same state key, repeated visits within
one episode included (docs/credit.md, "GiGPO"). Singleton and all-equal anchor groups give A^S = 0. A `None`
state key never anchors (see `segments.py`).

Optional similarity anchors (`similarity_anchors=True`, for text states): within each task group the
distinct state keys are clustered greedily in order of first appearance; a key joins the first cluster
whose first member has `difflib.SequenceMatcher` ratio >= `similarity_threshold`, else it founds a new
cluster. This loops over distinct keys per group (not over steps) and costs O(U^2) ratio calls per group.

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
from agentrl.errors import ConfigError
from agentrl.types import StepBatch


@dataclass(frozen=True)
class GiGPOConfig:
    """Options of GiGPO.

    gamma:                discount of the step returns R_t used in the anchor-group term.
    step_weight:          omega, the weight of the step term (0 gives GRPO with the same `mode`).
    mode:                 "mean_norm" centres; "mean_std_norm" also divides by the unbiased std + 1e-6.
    episode_stats:        "trajectory" or "steps" for the episode term (see `common.episode_advantages`).
    invalid_penalty:      subtracted from the reward of every unparsable step, before returns.
    similarity_anchors:   cluster text state keys by similarity instead of exact equality.
    similarity_threshold: the `difflib.SequenceMatcher` ratio a key needs to join a cluster.
    """

    gamma: float = 0.95
    step_weight: float = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1
    similarity_anchors: bool = False
    similarity_threshold: float = 0.95

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, NORM_MODES)
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"credit gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.similarity_threshold <= 1.0:
            raise ConfigError(
                f"credit similarity_threshold must be in [0, 1], got {self.similarity_threshold}"
            )


def gigpo(batch: StepBatch, config: GiGPOConfig) -> np.ndarray:
    """[S] float: A^E + step_weight * A^S for every step (see the module docstring)."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    episode_term = episode_advantages(batch, rewards, config.mode, config.episode_stats)
    if config.step_weight == 0.0:
        return episode_term
    step_returns = discounted_returns(batch, rewards, config.gamma)
    anchors = similarity_anchor_ids(batch, config.similarity_threshold) if config.similarity_anchors else None
    step_term = group_normalise(step_returns, anchor_ids(batch) if anchors is None else anchors, config.mode)
    return episode_term + config.step_weight * step_term


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
