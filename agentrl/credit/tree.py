"""Tree rollouts in credit assignment: one decision node per copied prefix step (docs/credit.md, "Trees").

What this is: the helpers every estimator uses on a batch whose episodes branched from each other
(`StepBatch.parent`, `branch_step`). A branch copies its parent's first `branch_step` steps; those copies
and their original are ONE decision, taken once, however many branches continue from it. Each such node
(`StepBatch.origin`) is reached by several trajectories (episodes), and a per-trajectory quantity of a node
is the mean over those trajectories:

    merge_shared(v)[r] = mean of v over the rows r' with origin[r'] == origin[r]

so the original and its copies carry the same value, and the trainer trains the original alone (the copies
have `StepBatch.shared_copy` set). On a flat batch every row is its own node and nothing changes.

What this is not: an estimator (`tree_grpo.py` is one) and not the runner that makes trees.
"""

from __future__ import annotations

import numpy as np

from agentrl.types import StepBatch


def merge_shared(values: np.ndarray, batch: StepBatch) -> np.ndarray:
    """[S] float: each row's value replaced by the mean over its decision node (identity on a flat batch)."""
    values = np.asarray(values, dtype=np.float64)
    if not batch.is_tree:
        return values
    counts = np.bincount(batch.origin, minlength=batch.num_steps)
    sums = np.bincount(batch.origin, weights=values, minlength=batch.num_steps)
    return (sums / np.maximum(counts, 1))[batch.origin]


def tree_of(batch: StepBatch) -> np.ndarray:
    """[E] int: the root episode of each episode's tree (itself for an episode without a parent)."""
    root = np.arange(batch.num_episodes, dtype=np.int64)
    if batch.parent is None:
        return root
    parent = batch.parent
    for _ in range(batch.num_episodes):  # at most the tree depth passes
        up = parent[root]
        if not (up >= 0).any():
            break
        root = np.where(up >= 0, up, root)
    return root
