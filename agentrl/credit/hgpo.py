"""HGPO (Hierarchy of Groups, arXiv 2602.22817): step advantages from groups of ever longer shared history.

For step t and each level k = 1 .. min(K+1, t+1), the level-k group holds every step of the same task group
whose last k states states[t-k+1 .. t] are identical (k = 1 is GiGPO's anchor group). In each group of >= 2
members

    a_k = R_t - mean                     (mode="mean_norm")
    a_k = (R_t - mean) / (std + 1e-6)    (mode="mean_std_norm", the default; std is the *population* std)

items whose value is exactly 0 are dropped (singletons and all-equal groups give 0), and

    A = sum_k w_k a_k / (sum_k w_k + 1e-6),   w_k = (k+1)^alpha,   no item left -> A = 0.

`base_group=True` adds the GRPO episode term (population std, same `mode`) as level k = 0, weight 1.
Speed: one sort serves every level. Each step gets the key (task group, s_t, s_{t-1}, ..., s_{t-K}), states
as small local indices within their group (0 where the history is shorter), packed into one int64 with the
row number; after one `np.sort` the level-k groups are the runs of equal k-state prefixes, and each level's
statistics are sequential segment reductions over those runs (`runs_normalise`). When the packed key would
not fit in 63 bits (huge groups or batches), history ids are built level by level instead:
id_k(t) = dense(id_{k-1}(t-1), state id(t)), one sort per level (`history_levels`).

What this is not: the prompt builder that shows the agent its last K turns (K here must match it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import (
    EPISODE_STATS,
    NORM_MODES,
    STD_EPS,
    NormMode,
    apply_invalid_penalty,
    check_choice,
    discounted_returns,
    episode_advantages,
    group_normalise,
    runs_normalise,
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
    histories = history_sort(batch, config.history + 1)
    if histories is None:
        order = np.arange(batch.num_steps)
        levels = _levels_by_ids(batch, step_returns, config)
    else:
        order, starts_by_level = histories
        levels = _levels_by_runs(step_returns[order], batch.step[order], starts_by_level, config.mode)
    weighted = np.zeros(batch.num_steps)  # rows in `order`
    weights = np.zeros(batch.num_steps)
    if config.base_group:
        level_zero = episode_advantages(batch, rewards, config.mode, config.episode_stats, unbiased=False)
        _accumulate(weighted, weights, slice(None), level_zero[order], 1.0)
    for level, (rows, values) in enumerate(levels, start=1):
        _accumulate(weighted, weights, rows, values, (level + 1.0) ** config.alpha)
    advantages = np.empty(batch.num_steps)
    advantages[order] = weighted / (weights + STD_EPS)
    return advantages


Rows = slice | np.ndarray


def _levels_by_runs(
    returns: np.ndarray, steps: np.ndarray, starts_by_level: list[np.ndarray], mode: NormMode
) -> Iterator[tuple[Rows, np.ndarray]]:
    """Per level, (rows, their advantages) over sorted rows: only rows of runs of >= 2 steps whose history
    is long enough (the others are 0); short-history steps only ever share runs with each other."""
    for level, starts in enumerate(starts_by_level, start=1):
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[-1] = True
        shared = ~(starts & ends)
        if level > 1:
            shared &= steps >= level - 1
        rows = np.flatnonzero(shared)
        yield rows, runs_normalise(returns[rows], starts[rows], mode, unbiased=False)


def _levels_by_ids(
    batch: StepBatch, returns: np.ndarray, config: HGPOConfig
) -> Iterator[tuple[Rows, np.ndarray]]:
    """Per level, (all rows, their advantages) from dense history ids (the path for huge key ranges)."""
    for level, history_ids in enumerate(history_levels(batch, config.history + 1), start=1):
        values = group_normalise(returns, history_ids, config.mode, unbiased=False)
        if level > 1:
            values[batch.step < level - 1] = 0.0  # too short a history: no level-k group
        yield slice(None), values


def history_sort(batch: StepBatch, max_level: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """One sort for levels 1 .. max_level: (order [S], per level [S] bool marking where a level-k group
    starts in that order), or None when the packed key needs more than 63 bits.

    The key of step t is (task group, s_t, s_{t-1}, ..., s_{t-max_level+1}) with each state as its index
    within its group plus one (0: before the episode's start), so equal k-state histories of one group have
    equal k-prefixes and sort next to each other. Steps with t < k-1 have a 0 in their k-prefix: they only
    ever group with each other, and callers drop their level-k values.
    """
    steps = batch.num_steps
    if steps == 0:
        return None
    state = step_state_ids(batch)[0]
    group = batch.group[batch.episode]
    lowest = np.full(int(batch.group.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(lowest, group, state)
    local = state - lowest[group]
    local += 1  # state ids are unique batch-wide, so this is injective within a group; 0 means "no state"
    width = int(local.max()).bit_length()
    group_bits = max(int(lowest.size - 1).bit_length(), 1)
    row_bits = steps.bit_length()
    if group_bits + max_level * width + row_bits > 63:
        return None
    key = group.astype(np.int64)  # built in place: at 1M steps every fresh array costs page faults
    for back in range(max_level):
        key <<= width
        key[back:] |= local[: steps - back]
        crossed = back + np.flatnonzero(
            batch.step[back:] < back
        )  # the row `back` earlier is another episode's
        key[crossed] &= ~((1 << width) - 1)
    key <<= row_bits
    key |= np.arange(steps, dtype=np.int64)
    key.sort()
    order = key & ((1 << row_bits) - 1)
    changed = key[1:] ^ key[:-1]  # >= 2^b exactly where the bits above b differ (keys are non-negative)
    starts_by_level = []
    for level in range(1, max_level + 1):
        starts = np.empty(steps, dtype=bool)
        starts[0] = True
        np.greater_equal(changed, 1 << ((max_level - level) * width + row_bits), out=starts[1:])
        starts_by_level.append(starts)
    return order, starts_by_level


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


def _accumulate(
    weighted: np.ndarray, weights: np.ndarray, rows: Rows, values: np.ndarray, weight: float
) -> None:
    """Add `weight * value` and `weight` at `rows` where the value is non-zero (zero items are dropped)."""
    weights[rows] += np.where(values != 0.0, weight, 0.0)
    values *= weight
    weighted[rows] += values
