"""HGPO (Hierarchy of Groups, arXiv 2602.22817): step advantages from groups of ever longer shared history.

For step t and each level k = 1 .. min(K+1, t+1), the level-k group holds every step of the same task group
whose last k states states[t-k+1 .. t] are identical (k = 1 is GiGPO's anchor group). In each group of >= 2
members

    a_k = R_t - mean                     (mode="mean_norm")
    a_k = (R_t - mean) / (std + 1e-6)    (mode="mean_std_norm", the default; std is the *population* std)

items whose value is exactly 0 are dropped (singletons and all-equal groups give 0), and

    A = sum_k w_k a_k / (sum_k w_k + 1e-6),   w_k = (k+1)^alpha,   no item left -> A = 0.

`base_group=True` adds the GRPO episode term (population std, same `mode`) as level k = 0, weight 1.
History ids are built level by level: id_k(t) = dense(id_{k-1}(t-1), state id(t)), one `np.unique` per level.

What this is not: the prompt builder that shows the agent its last K turns (K here must match it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import (
    EPISODE_STATS,
    NORM_MODES,
    STD_EPS,
    apply_invalid_penalty,
    check_choice,
    discounted_returns,
    episode_advantages,
    group_normalise,
)
from agentrl.credit.segments import combine_ids, step_state_ids
from agentrl.errors import ConfigError
from agentrl.types import StepBatch


@dataclass(frozen=True)
class HGPOConfig:
    """Options of HGPO.

    gamma:           discount of the step returns R_t.
    history:         K, the history window the per-step prompts show; levels run k = 1 .. K+1.
    alpha:           level weights w_k = (k+1)^alpha (0 is uniform).
    mode:            "mean_std_norm" (population std) or "mean_norm".
    base_group:      add the episode term as level 0 with weight 1.
    episode_stats:   "trajectory" or "steps" for that episode term.
    invalid_penalty: subtracted from the reward of every unparsable step, before returns.
    """

    gamma: float = 0.95
    history: int = 2
    alpha: float = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    base_group: bool = False
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, NORM_MODES)
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)
        if self.history < 0:
            raise ConfigError(f"credit history must be >= 0, got {self.history}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"credit gamma must be in [0, 1], got {self.gamma}")


def hgpo(batch: StepBatch, config: HGPOConfig) -> np.ndarray:
    """[S] float: the weighted mean of the non-zero level advantages of each step."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    step_returns = discounted_returns(batch, rewards, config.gamma)
    weighted = np.zeros(batch.num_steps)
    weights = np.zeros(batch.num_steps)
    if config.base_group:
        level_zero = episode_advantages(batch, rewards, config.mode, config.episode_stats, unbiased=False)
        _accumulate(weighted, weights, level_zero, 1.0)
    for level, history_ids in enumerate(history_levels(batch, config.history + 1), start=1):
        values = group_normalise(step_returns, history_ids, config.mode, unbiased=False)
        if level > 1:
            values[batch.step < level - 1] = 0.0  # too short a history: no level-k group
        _accumulate(weighted, weights, values, (level + 1.0) ** config.alpha)
    return weighted / (weights + STD_EPS)


def history_levels(batch: StepBatch, max_level: int) -> list[np.ndarray]:
    """For k = 1 .. max_level (while some step has t >= k-1): [S] dense ids of each step's last-k-states.

    Equal ids mean the same task group and the same k states. Steps with t < k-1 share one extra id that
    callers must ignore.
    """
    state = step_state_ids(batch)[0]  # already dense
    levels = [state]
    for level in range(2, max_level + 1):
        short = batch.step < level - 1
        if short.all():
            break
        previous = np.empty_like(state)
        previous[0] = 0
        previous[1:] = levels[-1][:-1]  # the history id of step t-1 (same episode wherever t >= 1)
        previous[short] = int(previous.max()) + 1
        levels.append(combine_ids(previous, np.where(short, 0, state)))
    return levels


def _accumulate(weighted: np.ndarray, weights: np.ndarray, values: np.ndarray, weight: float) -> None:
    """Add `weight * value` and `weight` where the value is non-zero (zero items are dropped)."""
    weighted += weight * values
    weights += weight * (values != 0.0)
