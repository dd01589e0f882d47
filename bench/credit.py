"""Benchmark of the credit estimators on ~1M step samples; prints ONE JSON object.

    .venv/bin/python bench/credit.py            # 4,096 groups x 8 episodes x 20-40 steps (~983k steps)
    .venv/bin/python bench/credit.py --quick    # ~100k steps; exits 1 unless GiGPO, HGPO and SALT are
                                                # >= 10x faster than the dict-and-loop GiGPO

Keys: `<name>_1m_s` — seconds of each registered estimator (default options, best of `repeats`) on the big
batch (its exact size is `steps`; in --quick mode the time on ~100k steps is scaled linearly to 1M and
`scaled_from_steps` says so); `gigpo_loop_1m_s` — a straightforward pure-Python dict-and-loop GiGPO,
measured in the same run on the same batch (`gigpo_loop_scaled_from` = the steps it ran on; measured
on a 10x smaller batch and scaled linearly it looked ~3x faster per step than it is, so we do not);
`<name>_speedup_vs_loop` for gigpo, hgpo and salt; `gigpo_loop_max_abs_diff` — the loop and the vectorised
GiGPO agree; `anchor_hit_rate` and `anchor_group_size` of the synthetic batch; `ok` — every speedup >= 10
and the two GiGPOs agree.

Interning: a `StepBatch` turns its state keys and actions into int codes once, when it is built
(`types.intern_keys`, one C-level dict pass), and every estimator works on those codes. `<name>_1m_s` is
the estimator call on a built batch; `intern_1m_s` is what building costs on top for string keys and
actions (the one per-key Python-level pass); `<name>_speedup_incl_interning` = loop / (estimator +
interning), the end-to-end ratio from string keys. The loop gets the raw keys, as a straightforward
implementation would.

The synthetic episodes walk an 8x8 torus grid from one start cell per task (state key = task and cell, so
no two tasks share a key), so steps of one group revisit states often, as in grid and puzzle envs.
Rewards are terminal (40% success) plus a few small step rewards; 5% of turns are invalid.

What this is not: a test of correctness (tests/unit/test_credit_*.py are), nor a model or trainer benchmark.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import harness
import numpy as np

from agentrl.credit import ESTIMATORS, estimate
from agentrl.credit.metrics import credit_metrics
from agentrl.types import StepBatch, intern_keys

GRID = 8
MOVES = ("stay", "up", "down", "left", "right")
MOVE_DELTAS = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]])
TARGET_SPEEDUP = 10.0


def synthetic_batch(groups: int, episodes_per_group: int = 8, seed: int = 0) -> StepBatch:
    """Grouped random walks on a torus grid (see the module docstring)."""
    rng = np.random.default_rng(seed)
    num_episodes = groups * episodes_per_group
    lengths = rng.integers(20, 41, size=num_episodes)
    steps = int(lengths.sum())
    episode = np.repeat(np.arange(num_episodes), lengths)
    offsets = np.cumsum(lengths) - lengths
    step = np.arange(steps) - offsets[episode]
    moves = rng.choice(len(MOVES), size=steps, p=[0.1, 0.3, 0.2, 0.2, 0.2])
    start = rng.integers(0, GRID, size=(groups, 2))
    # cell before each step: start + cumulative moves of the earlier steps of the episode (mod GRID)
    cumulative = np.cumsum(MOVE_DELTAS[moves], axis=0)
    before_episode = np.where((offsets > 0)[:, None], cumulative[np.maximum(offsets - 1, 0)], 0)
    after = (
        start[np.repeat(np.arange(groups), episodes_per_group)][episode]
        + cumulative
        - before_episode[episode]
    )
    after %= GRID
    starts = start[np.repeat(np.arange(groups), episodes_per_group)]
    cells = np.empty((steps + num_episodes, 2), dtype=np.int64)
    state_rows = np.arange(steps) + episode + 1
    cells[state_rows] = after
    cells[offsets + np.arange(num_episodes)] = starts
    pool = [f"task{g}/cell({x},{y})" for g in range(groups) for x in range(GRID) for y in range(GRID)]
    cell_groups = np.repeat(np.repeat(np.arange(groups), episodes_per_group), lengths + 1)
    rewards = np.where(rng.random(steps) < 0.05, 0.1, 0.0)
    last = offsets + lengths - 1
    rewards[last] += rng.random(num_episodes) < 0.4
    return StepBatch(
        group=np.repeat(np.arange(groups), episodes_per_group),
        episode=episode,
        step=step,
        rewards=rewards,
        valid=rng.random(steps) > 0.05,
        states=tuple(
            map(pool.__getitem__, (cell_groups * GRID**2 + cells[:, 0] * GRID + cells[:, 1]).tolist())
        ),
        actions=tuple(map(MOVES.__getitem__, moves.tolist())),
        answer_probs=rng.uniform(0.01, 1.0, size=steps),
        outcome=rewards[last],
        reward_components=np.stack([rewards, rng.random(steps) < 0.5], axis=1).astype(np.float64),
    )


def gigpo_loop(
    batch: StepBatch, gamma: float = 0.95, step_weight: float = 1.0, penalty: float = 0.1
) -> np.ndarray:
    """GiGPO (`mean_norm`, trajectory stats) the straightforward way: Python lists, dicts and loops."""
    groups = batch.group.tolist()
    lengths = batch.lengths.tolist()
    rewards = [
        r - (0.0 if v else penalty) for r, v in zip(batch.rewards.tolist(), batch.valid.tolist(), strict=True)
    ]
    episode_rewards, step_returns, states, start, state_start = [], [], [], 0, 0
    for length in lengths:
        chunk = rewards[start : start + length]
        returns, running = [0.0] * length, 0.0
        for t in range(length - 1, -1, -1):
            running = chunk[t] + gamma * running
            returns[t] = running
        episode_rewards.append(sum(chunk))
        step_returns.append(returns)
        states.append(batch.states[state_start : state_start + length])
        start += length
        state_start += length + 1
    totals: dict[int, list[float]] = defaultdict(list)
    anchors: dict[tuple[int, Any], list[float]] = defaultdict(list)
    for i, group in enumerate(groups):
        totals[group].append(episode_rewards[i])
        for state, value in zip(states[i], step_returns[i], strict=True):
            anchors[(group, state)].append(value)
    group_mean = {group: _mean_if_varied(values) for group, values in totals.items()}
    anchor_mean = {key: _mean_if_varied(values) for key, values in anchors.items()}
    out: list[float] = []
    for i, group in enumerate(groups):
        mean = group_mean[group]
        episode_term = 0.0 if mean is None else episode_rewards[i] - mean
        for state, value in zip(states[i], step_returns[i], strict=True):
            anchor = anchor_mean[(group, state)]
            out.append(episode_term + step_weight * (0.0 if anchor is None else value - anchor))
    return np.array(out)


def _mean_if_varied(values: list[float]) -> float | None:
    """The mean, or None for singleton and all-equal groups (whose advantage is 0)."""
    if len(values) < 2 or min(values) == max(values):
        return None
    return sum(values) / len(values)


def intern_batch_keys(batch: StepBatch) -> None:
    """What building a batch adds for its keys: interning the state keys and the actions."""
    intern_keys(batch.states)
    if batch.actions is not None:
        intern_keys(batch.actions)


def best_time(function: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def run(groups: int, repeats: int, scale_to_1m: bool) -> dict[str, Any]:
    """All the timings; see the module docstring for the keys."""
    big = synthetic_batch(groups, seed=0)
    scale = 1_000_000 / big.num_steps if scale_to_1m else 1.0
    result: dict[str, Any] = {"steps": big.num_steps, "groups": groups, "episodes_per_group": 8}
    if scale_to_1m:
        result["scaled_from_steps"] = big.num_steps
    for name in ESTIMATORS:
        result[f"{name}_1m_s"] = round(scale * best_time(lambda name=name: estimate(name, big), repeats), 4)
    # the loop runs on the same batch: scaled from a 10x smaller one it looked ~4x faster per step than it
    # is (its dicts and lists stay in cache and the garbage collector has less to walk)
    result["gigpo_loop_1m_s"] = round(scale * best_time(lambda: gigpo_loop(big), repeats), 4)
    result["gigpo_loop_scaled_from"] = big.num_steps
    result["gigpo_loop_max_abs_diff"] = float(np.max(np.abs(gigpo_loop(big) - estimate("gigpo", big))))
    result["intern_1m_s"] = round(scale * best_time(lambda: intern_batch_keys(big), repeats), 4)
    for name in ("gigpo", "hgpo", "salt"):
        loop, own = result["gigpo_loop_1m_s"], result[f"{name}_1m_s"]
        result[f"{name}_speedup_vs_loop"] = round(loop / own, 1)
        result[f"{name}_speedup_incl_interning"] = round(loop / (own + result["intern_1m_s"]), 1)
    metrics = credit_metrics(big, estimate("gigpo", big))
    result["anchor_hit_rate"] = round(metrics["credit/anchor_hit_rate"], 4)
    result["anchor_group_size"] = round(metrics["credit/anchor_group_size"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~100k steps; fail unless >= 10x the loop")
    harness.add_out_argument(parser, "credit")
    args = parser.parse_args(argv)
    result = run(groups=410, repeats=3, scale_to_1m=True) if args.quick else run(4096, 2, False)
    slow = [name for name in ("gigpo", "hgpo", "salt") if result[f"{name}_speedup_vs_loop"] < TARGET_SPEEDUP]
    result["ok"] = not slow and result["gigpo_loop_max_abs_diff"] < 1e-9
    baseline = "a dict-and-loop GiGPO on the same batch, same run"
    harness.emit("credit", result, baseline=baseline, out=harness.out_path(args, "credit"))
    return 1 if args.quick and not result["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
