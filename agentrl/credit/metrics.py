"""Per-training-step credit metrics: how much signal the groups and anchors carry, and the advantage scale.

    credit/zero_variance_groups  fraction of task groups whose episode returns are all equal (or that hold
                                 one episode): GRPO gives them no signal
    credit/anchor_hit_rate       fraction of steps whose exact anchor group (same task group, same state
                                 key) has >= 2 members: the steps GiGPO's step term can say something about
    credit/anchor_group_size     mean size of the anchor groups (over groups, not steps)
    credit/advantage_mean        mean of the step advantages
    credit/advantage_std         population std of the step advantages

What this is not: a logger. It returns plain floats; the trainer decides where they go.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit.common import apply_invalid_penalty, episode_returns
from agentrl.credit.grpo import GRPOConfig
from agentrl.credit.segments import dense_ids, step_state_ids
from agentrl.types import StepBatch

DEFAULT_INVALID_PENALTY = GRPOConfig.invalid_penalty


def credit_metrics(
    batch: StepBatch, advantages: np.ndarray, invalid_penalty: float = DEFAULT_INVALID_PENALTY
) -> dict[str, float]:
    """The metrics above for one batch and the [S] advantages some estimator gave it."""
    advantages = np.asarray(advantages, dtype=np.float64)
    sizes = anchor_group_sizes(batch)
    return {
        "credit/zero_variance_groups": zero_variance_group_fraction(batch, invalid_penalty),
        "credit/anchor_hit_rate": float(
            (sizes[sizes >= 2].sum() / batch.num_steps) if batch.num_steps else 0.0
        ),
        "credit/anchor_group_size": float(sizes.mean()) if sizes.size else 0.0,
        "credit/advantage_mean": float(advantages.mean()) if advantages.size else 0.0,
        "credit/advantage_std": float(advantages.std()) if advantages.size else 0.0,
    }


def zero_variance_group_fraction(batch: StepBatch, invalid_penalty: float = DEFAULT_INVALID_PENALTY) -> float:
    """Fraction of task groups whose episode returns (after the invalid-action penalty) are all equal."""
    if batch.num_episodes == 0:
        return 0.0
    returns = episode_returns(batch, apply_invalid_penalty(batch.rewards, batch.valid, invalid_penalty))
    groups = batch.group
    low = np.full(int(groups.max()) + 1, np.inf)
    high = np.full(low.size, -np.inf)
    np.minimum.at(low, groups, returns)
    np.maximum.at(high, groups, returns)
    present = np.bincount(groups) > 0
    return float(np.mean(low[present] == high[present]))


def anchor_group_sizes(batch: StepBatch) -> np.ndarray:
    """[number of anchor groups] int: how many steps share each (task group, state key)."""
    if batch.num_steps == 0:
        return np.zeros(0, dtype=np.int64)
    return np.bincount(dense_ids(step_state_ids(batch)[0]))
