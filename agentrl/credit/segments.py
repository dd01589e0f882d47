"""Integer ids for state keys, actions and histories, so estimators can group steps with segment operations.

What this is: the one place where hashable keys (state keys, actions) become dense integer ids, done once
per batch, plus the step-row views of them (`step_state_ids`) and the combination of several id columns
into one (`combine_ids`). Keys are compared exactly (Python `==`, as dict keys), always within one task
group.

A key of `None` means "unknown state" (an env that reports no state key): it never equals any other key,
not even another `None`, so such steps never share an anchor and GiGPO degenerates to GRPO on them.

What this is not: similarity matching (GiGPO's optional text-similarity anchors live in `gigpo.py`).

Speed: the keys were interned once when the batch was built (`StepBatch.state_codes`, from
`types.intern_keys`: one pass through one dict in C); everything here is numpy on int arrays. Ids
are made dense with a presence table (O(N)) when their range is small, else with `np.unique` (a sort).
"""

from __future__ import annotations

import numpy as np

from agentrl.types import StepBatch

PRESENCE_TABLE_FACTOR = 4  # use the O(N) presence table while the id range is <= this many times N


def group_key_ids(codes: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """[N] dense int ids, equal exactly when (groups[i], codes[i]) are equal pairs; code -1 gets fresh ids.

    codes:  [N] int from `intern_keys` (the row of each key's first occurrence, or -1 for `None`, which
            never equals anything)
    groups: [N] int

    O(N), no sort in the common case: a code is the row where its key first occurred, so a row whose group
    is the group of that first row can use the code itself as its pair id. Only keys that recur in another
    group (rare: different tasks seldom share a state) need a sort, over those rows alone.
    """
    codes = np.asarray(codes, dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    count = codes.size
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    unknown = codes < 0
    known_codes = np.where(unknown, 0, codes)
    pair = known_codes.copy()
    foreign = (groups[known_codes] != groups) & ~unknown
    if foreign.any():
        pair[foreign] = count + combine_ids(known_codes[foreign], groups[foreign])
    pair[unknown] = 2 * count + np.arange(int(unknown.sum()))
    return dense_ids(pair)


def combine_ids(*columns: np.ndarray) -> np.ndarray:
    """[N] dense int ids of the rows of several [N] non-negative int columns (equal rows, equal ids).

    Each column should already be dense-ish (values < N), so the pairwise products stay far from overflow.
    """
    combined = np.asarray(columns[0], dtype=np.int64)
    for column in columns[1:]:
        column = np.asarray(column, dtype=np.int64)
        combined = dense_ids(combined * (int(column.max(initial=0)) + 1) + column)
    return combined if len(columns) > 1 else dense_ids(combined)


def dense_ids(values: np.ndarray) -> np.ndarray:
    """[N] int in 0..U-1 for [N] non-negative ints: the rank of each value among the U distinct values."""
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return values
    limit = int(values.max()) + 1
    if limit <= PRESENCE_TABLE_FACTOR * values.size + 1024:
        present = np.zeros(limit, dtype=bool)
        present[values] = True
        ranks = np.cumsum(present)
        ranks -= 1  # in place: a fresh 1M-row array costs page faults
        return ranks[values]
    index_bits = int(values.size).bit_length()
    if limit.bit_length() + index_bits <= 62:
        return _ranks_by_packed_sort(values, index_bits)
    return np.unique(values, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _ranks_by_packed_sort(values: np.ndarray, index_bits: int) -> np.ndarray:
    """Dense ranks via one sort of (value << index_bits | row): a plain sort is cheaper than an argsort."""
    packed = np.sort((values << index_bits) | np.arange(values.size, dtype=np.int64))
    rows = packed & ((1 << index_bits) - 1)
    ordered = packed >> index_bits
    starts = np.empty(values.size, dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[rows] = np.cumsum(starts) - 1
    return ranks


def state_ids(batch: StepBatch) -> np.ndarray:
    """[S + E] int ids of every entry of `batch.states`, grouped by task group (see the module docstring).

    In a tree batch a copied state entry takes its original's id, so a branch shares its prefix states and
    its branch-point state with its parent by construction, even where the env reports `None` keys."""
    ids = group_key_ids(batch.state_codes, state_groups(batch))
    return ids[batch.state_origin] if batch.is_tree else ids


def state_groups(batch: StepBatch) -> np.ndarray:
    """[S + E] int: the task group of every entry of `batch.states` (episode i owns T_i + 1 of them).

    Scatters each step's episode to the row of its state, plus each episode's final state, then gathers
    the groups: faster than `np.repeat` with per-episode counts on large batches (`bench/credit.py`)."""
    episode_of_state = np.empty(batch.num_steps + batch.num_episodes, dtype=np.int64)
    episode_of_state[np.arange(batch.num_steps) + batch.episode] = batch.episode
    episode_of_state[np.cumsum(batch.lengths + 1) - 1] = np.arange(batch.num_episodes)
    return batch.group[episode_of_state]


def step_state_ids(batch: StepBatch) -> tuple[np.ndarray, np.ndarray]:
    """([S], [S]) int: the id of the state each step was taken in, and of the state it led to."""
    ids = state_ids(batch)
    before = np.arange(batch.num_steps, dtype=np.int64) + batch.episode
    return ids[before], ids[before + 1]


def action_ids(batch: StepBatch) -> np.ndarray | None:
    """[S] dense int ids of `batch.actions` (batch-wide, not per group), or None when there are none.

    Combine them with a state id (which carries the task group) to group steps within a task group.
    """
    if batch.action_codes is None:
        return None
    return group_key_ids(batch.action_codes, np.zeros(batch.num_steps, dtype=np.int64))
