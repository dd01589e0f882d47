"""MC-GRPO (arXiv 2601.22582): the group median as baseline and the median absolute deviation as scale.

    A_i = (R_i - median_j R_j) / (MAD + mad_eps),   MAD = median_j |R_j - median_k R_k|

The sampler draws G+1 episodes per task (an odd group), so the median is the return of one of them; that
episode's advantage is exactly 0, which drops it from the policy-gradient loss (the trainer leaves out
episodes whose every step has advantage 0). With an even group the median is the mean of the two middle
returns and no episode is dropped.

Beware: with binary rewards MAD is often 0 (more than half the group share one return), and the advantages
become +-1/mad_eps = +-1000 with the default. That is the method as published; raise `mad_eps` to tame it.

A group of fewer than two episodes, or whose returns are all equal, gives 0.

What this is not: the sampler that draws G+1 episodes (set `train.group_size` odd).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.credit.common import apply_invalid_penalty, episode_returns
from agentrl.errors import ConfigError
from agentrl.types import StepBatch


@dataclass(frozen=True)
class MCGRPOConfig:
    """Options of MC-GRPO.

    mad_eps:         added to the median absolute deviation before dividing.
    invalid_penalty: subtracted from the reward of every unparsable step, before returns.
    """

    mad_eps: float = 1e-3
    invalid_penalty: float = 0.1

    def __post_init__(self) -> None:
        if self.mad_eps <= 0.0:
            raise ConfigError(f"credit mad_eps must be > 0, got {self.mad_eps}")


def mc_grpo(batch: StepBatch, config: MCGRPOConfig) -> np.ndarray:
    """[S] float: the median-centred, MAD-scaled episode return of each step's episode."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    returns = episode_returns(batch, rewards)
    median = group_median(returns, batch.group)
    deviation = np.abs(returns - median[batch.group])
    scale = group_median(deviation, batch.group) + config.mad_eps
    advantages = (returns - median[batch.group]) / scale[batch.group]
    counts = np.bincount(batch.group)
    degenerate = (counts < 2) | (np.bincount(batch.group, weights=deviation) == 0.0)
    return np.where(degenerate[batch.group], 0.0, advantages)[batch.episode]


def group_median(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """[num_groups] float: the median of each group's values (sort-based; empty groups give 0)."""
    order = np.lexsort((values, groups))
    counts = np.bincount(groups)
    starts = np.cumsum(counts) - counts
    low = starts + np.maximum(counts - 1, 0) // 2
    high = starts + counts // 2
    present = counts > 0
    median = np.zeros(counts.size)
    ordered = values[order]
    median[present] = 0.5 * (ordered[low[present]] + ordered[np.minimum(high, starts + counts - 1)[present]])
    return median
