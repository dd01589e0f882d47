"""Vectorised building blocks shared by the advantage estimators (docs/credit.md, "Terms").

What this is: pure numpy functions over a `StepBatch` or over flat arrays with integer segment labels.
Segment statistics use `np.bincount`; the only Python loops run over time steps (at most max T_i
iterations), never over individual steps.

What this is not: an estimator. Each estimator lives in its own file and composes these helpers.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from agentrl.errors import ConfigError
from agentrl.types import StepBatch

NormMode = Literal["mean_norm", "mean_std_norm"]
EpisodeStats = Literal["trajectory", "steps"]
NORM_MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")
EPISODE_STATS: tuple[str, ...] = ("trajectory", "steps")
STD_EPS = 1e-6


def apply_invalid_penalty(rewards: np.ndarray, valid: np.ndarray, penalty: float) -> np.ndarray:
    """[S] rewards with `penalty` subtracted at every invalid step, before returns (docs/credit.md)."""
    return np.asarray(rewards, dtype=np.float64) - penalty * (~np.asarray(valid, dtype=bool))


def episode_offsets(batch: StepBatch) -> np.ndarray:
    """[E] int: index of each episode's first step row."""
    lengths = batch.lengths
    return np.cumsum(lengths) - lengths


def episode_returns(batch: StepBatch, rewards: np.ndarray) -> np.ndarray:
    """[E] float: R_i = sum_t rewards[t] of each episode."""
    return np.bincount(batch.episode, weights=rewards, minlength=batch.num_episodes).astype(np.float64)


def discounted_returns(
    batch: StepBatch, rewards: np.ndarray, gamma: float, stop: np.ndarray | None = None
) -> np.ndarray:
    """[S] float: R_t = sum_{k>=t} gamma^(k-t) rewards[k] within each episode; with `stop` ([S] bool) the
    sum also ends at the first step k >= t where stop[k] is True (R_t = r_t + gamma * R_{t+1}, the second
    term dropped after a stop step: a part's return, `StepBatch.boundary`).

    A reverse scan over time steps, vectorised across episodes. Exact for any gamma (no gamma^-t rescaling
    that would overflow on long episodes). The scan runs over a zero-padded [T_max, E] table when that is at
    most a few times larger than the batch, else over the flat rows.
    """
    returns = np.asarray(rewards, dtype=np.float64).copy()
    if batch.num_steps == 0:
        return returns
    # the factor each step's return takes of the next one's: gamma, or per step 0 after a stop
    carry: float | np.ndarray = gamma if stop is None else np.where(np.asarray(stop, bool), 0.0, gamma)
    lengths = batch.lengths
    longest = int(lengths.max())
    if longest * batch.num_episodes <= 4 * batch.num_steps + 1024:
        return _padded_returns(batch, returns, carry, longest)
    offsets = episode_offsets(batch)
    for t in range(longest - 2, -1, -1):
        rows = offsets[lengths > t + 1] + t
        returns[rows] += (carry[rows] if isinstance(carry, np.ndarray) else carry) * returns[rows + 1]
    return returns


def _padded_returns(
    batch: StepBatch, rewards: np.ndarray, carry: float | np.ndarray, longest: int
) -> np.ndarray:
    """The reverse scan on a [T_max + 1, E] table whose padding (after each episode's end) stays 0; `carry`
    the factor each step's return takes of the next one's (one float, or [S])."""
    cells = batch.step * batch.num_episodes + batch.episode
    flat = np.zeros((longest + 1) * batch.num_episodes)
    flat[cells] = rewards
    table = flat.reshape(longest + 1, batch.num_episodes)  # a view: the scan writes through to `flat`
    if not isinstance(carry, np.ndarray):
        for t in range(longest - 2, -1, -1):
            table[t] += carry * table[t + 1]
        return flat[cells]
    factors = np.zeros_like(flat)
    factors[cells] = carry
    kept = factors.reshape(longest + 1, batch.num_episodes)
    for t in range(longest - 2, -1, -1):
        table[t] += kept[t] * table[t + 1]
    return flat[cells]


def episode_advantages(
    batch: StepBatch,
    rewards: np.ndarray,
    mode: NormMode,
    episode_stats: EpisodeStats,
    unbiased: bool = True,
    leave_one_out: bool = False,
) -> np.ndarray:
    """[S] float: the GRPO episode term — R_i normalised within its task group, broadcast to its steps.

    episode_stats "trajectory": one entry per episode in the group statistics; "steps": one entry per step,
    each carrying its episode's return (verl-agent's default, which weights long episodes more).
    """
    returns = episode_returns(batch, rewards)
    if episode_stats == "steps":
        return group_normalise(
            returns[batch.episode],
            batch.group[batch.episode],
            mode,
            unbiased=unbiased,
            leave_one_out=leave_one_out,
        )
    per_episode = group_normalise(returns, batch.group, mode, unbiased=unbiased, leave_one_out=leave_one_out)
    return per_episode[batch.episode]


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ConfigError unless `value` is one of `choices` (for config `__post_init__`s)."""
    if value not in choices:
        raise ConfigError(f"credit {name} {value!r} is unknown; use one of {', '.join(choices)}")


def group_normalise(
    values: np.ndarray,
    groups: np.ndarray,
    mode: NormMode,
    eps: float = STD_EPS,
    unbiased: bool = True,
    leave_one_out: bool = False,
) -> np.ndarray:
    """[N] float: each value normalised against the other members of its group.

    mean_norm:     v - mean(group)                  (Dr.GRPO, arXiv 2503.20783: no std division)
    mean_std_norm: (v - mean(group)) / (std + eps)  (GRPO, arXiv 2402.03300 sec. 4.1.2; std unbiased (N-1)
                   unless `unbiased=False`)
    leave_one_out: the baseline is the mean of the *other* members (RLOO); std is still the group's.
    Groups with fewer than two members, and groups whose members are all equal, give exactly 0.
    """
    values = np.asarray(values, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    if values.size == 0:
        return values.copy()
    counts = np.bincount(groups).astype(np.float64)
    sums = np.bincount(groups, weights=values)
    mean = sums / np.maximum(counts, 1.0)
    deviation = values - mean[groups]
    centred = values - _leave_one_out_mean(values, groups, counts, sums) if leave_one_out else deviation
    # one per-group factor does both jobs: 0 for degenerate groups, 1 / (std + eps) or 1 otherwise
    degenerate = (counts < 2) | _all_equal(values, groups, counts.size)
    factor = np.where(degenerate, 0.0, 1.0)
    if mode == "mean_std_norm":
        factor /= _group_std(deviation, groups, counts, unbiased) + eps
    return centred * factor[groups]


def runs_normalise(
    values: np.ndarray, starts: np.ndarray, mode: NormMode, eps: float = STD_EPS, unbiased: bool = True
) -> np.ndarray:
    """`group_normalise` for values already ordered by group: `starts` [N] bool marks each group's first
    row (starts[0] must be True), so every group is one contiguous run. Same results as `group_normalise`
    (up to the order of floating-point summation), but its segment labels are non-decreasing, so every
    bincount and gather walks memory in order."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    first = np.flatnonzero(starts)
    counts = np.diff(first, append=values.size).astype(np.float64)
    segment = np.cumsum(starts)
    segment -= 1
    means: np.ndarray = np.bincount(segment, weights=values)
    means /= counts
    deviation = means[segment]  # scratch arrays are reused in place: fresh 1M-row arrays cost page faults
    np.subtract(values, deviation, out=deviation)
    # all members equal <=> no two neighbours inside a run differ; counted by a running sum read at run ends
    steps_up = np.empty(values.size, dtype=np.int64)
    steps_up[0] = 0
    np.cumsum((values[1:] != values[:-1]) & ~starts[1:], out=steps_up[1:])
    unequal = steps_up[np.append(first[1:] - 1, values.size - 1)] - steps_up[first]
    factor = np.where((counts < 2) | (unequal == 0), 0.0, 1.0)
    if mode == "mean_std_norm":
        squared = np.bincount(segment, weights=np.square(deviation), minlength=counts.size)
        factor /= np.sqrt(squared / np.maximum(counts - (1.0 if unbiased else 0.0), 1.0)) + eps
    deviation *= factor[segment]
    return deviation


def _leave_one_out_mean(
    values: np.ndarray, groups: np.ndarray, counts: np.ndarray, sums: np.ndarray
) -> np.ndarray:
    """[N]: mean_{j != i} v_j (RLOO baseline, arXiv 2402.14740). Singletons get 0 (masked later)."""
    others = np.maximum(counts[groups] - 1.0, 1.0)
    return (sums[groups] - values) / others


def _group_std(deviation: np.ndarray, groups: np.ndarray, counts: np.ndarray, unbiased: bool) -> np.ndarray:
    """[num_groups]: the standard deviation of each group from each value's deviation from its group mean
    (two-pass, so no cancellation)."""
    squared = np.bincount(groups, weights=deviation * deviation, minlength=counts.size)
    dof = np.maximum(counts - (1.0 if unbiased else 0.0), 1.0)
    return np.sqrt(squared / dof)


def _all_equal(values: np.ndarray, groups: np.ndarray, num_groups: int) -> np.ndarray:
    """[num_groups] bool: every member equal (so the advantage is exactly 0, not rounding noise / eps)."""
    low = np.full(num_groups, np.inf)
    high = np.full(num_groups, -np.inf)
    np.minimum.at(low, groups, values)
    np.maximum.at(high, groups, values)
    return low == high
