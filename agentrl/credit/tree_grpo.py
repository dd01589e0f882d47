"""Tree-GRPO-style advantages (Ji et al. 2025, "Tree Search for LLM Agent Reinforcement Learning",
arXiv 2509.21240): a group-level (inter-tree) GRPO term plus a sibling-relative (intra-tree) term at each
branching node of a tree rollout (docs/credit.md, "Tree-GRPO").

The paper samples M trees per prompt, each node one agent step, and gives each trajectory (root-to-leaf
path) H_i the sum of two group-relative advantages, as its authors' code computes it (AMAP-ML/Tree-GRPO,
verl/trainer/ppo/ray_trainer_ts.py, adv_estimator "tree": compute_grpo_outcome_advantage over the prompt's
uid plus the same over the tree's uid; std unbiased, eps 1e-6):

    A(H_i) = A_inter(H_i) + A_intra(H_i)
    A_inter(H_i) = (R(H_i) - mean over all trajectories of the prompt) / (std + eps)   (GRPO over the group)
    A_intra(H_i) = (R(H_i) - mean over the trajectories of H_i's tree) / (std + eps)

(That code gives a tree of ONE trajectory A_intra = R(H_i), mean 0 and std 1; here it gets 0, so that a flat
group is exactly GRPO.)

`intra` chooses the intra-tree term:
- "tree" (the default, the paper's): A_intra as above, GRPO over the trajectories of H_i's tree, added to
  A_inter per trajectory; a step shared by several trajectories (a copied prefix, one decision node) gets
  the mean of their sums (`tree.merge_shared`), as for the group term.
- "siblings" (issue 42's first version): the comparison is made at each branching node instead of over the
  whole tree, below.

With `intra="siblings"` the intra-tree comparison is at each branching node. With one decision node per step
(copies merged, `StepBatch.origin`), V(n) = the mean return of the trajectories through node n, and a node's
siblings are the distinct nodes that follow the same node (the tree's start, for t = 0). For step (i, t):

    A(i,t) = mean over the trajectories through node(i,t) of A_inter          (`tree.merge_shared`)
             + intra_weight * A_intra(node(i,t))
    A_intra(n) = normalise(V(n) over n's siblings)     when n's predecessor has >= 2 successors
               = A_intra(predecessor of n)             otherwise (a chain inherits its head's comparison)
               = 0                                     on the chain that starts a tree without branching

so every step after a branch point carries its branch's return against its siblings' (the same value along
the branch until it branches again), and the shared prefix before the first branch point only the group
term. With one branching node whose successors each lead to one leaf this is the paper's A_intra exactly.
A flat group (no parent links) has no branching node: A_intra = 0 and this is GRPO with the same `mode`
and `episode_stats`, exactly. Nested branches compare against their own siblings, not the whole tree.
With several trees per group (`rollout.tree.trees`: the paper's M trees) A_inter is over all their
trajectories and each tree has its own start, so the sibling term stays within a tree and a tree's root
prefix gets the mean of its leaves' A_inter: the inter-tree comparison (tests/unit/test_credit_trees.py).

What this is not: the tree search (the runner branches episodes; `Episode.parent_id`, `branch_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import (
    EPISODE_STATS,
    NORM_MODES,
    apply_invalid_penalty,
    check_choice,
    episode_advantages,
    episode_returns,
    group_normalise,
)
from agentrl.credit.tree import merge_shared, tree_of
from agentrl.types import StepBatch

INTRA = ("tree", "siblings")


@dataclass(frozen=True)
class TreeGRPOConfig:
    """Options of Tree-GRPO.

    mode:            the group (inter-tree) term: "mean_std_norm" (GRPO, default) or "mean_norm".
    intra:           the intra-tree term: "tree" (the paper's: GRPO over the trajectories of the tree) or
                     "siblings" (each node against its siblings at its branching node; module docstring).
    intra_mode:      the intra-tree term's normalisation (unbiased std).
    intra_weight:    the weight of the intra-tree term (0 gives GRPO with the same `mode`).
    episode_stats:   "trajectory" or "steps" for the group term (see `common.episode_advantages`).
    invalid_penalty: subtracted from the reward of every unparsable step, before returns.
    """

    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    intra: Literal["tree", "siblings"] = "tree"
    intra_mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    intra_weight: float = 1.0
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, NORM_MODES)
        check_choice("intra", self.intra, INTRA)
        check_choice("intra_mode", self.intra_mode, NORM_MODES)
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)


def tree_grpo(batch: StepBatch, config: TreeGRPOConfig) -> np.ndarray:
    """[S] float: the merged group term plus `intra_weight` times the intra-tree term (module docstring)."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    inter = merge_shared(episode_advantages(batch, rewards, config.mode, config.episode_stats), batch)
    if not batch.is_tree or config.intra_weight == 0.0:
        return inter
    returns = episode_returns(batch, rewards)
    if config.intra == "tree":
        within = group_normalise(returns, tree_of(batch), config.intra_mode)  # [E]: GRPO inside each tree
        return inter + config.intra_weight * merge_shared(within[batch.episode], batch)
    return inter + config.intra_weight * sibling_term(batch, returns, config.intra_mode)


def sibling_term(
    batch: StepBatch, returns: np.ndarray, mode: Literal["mean_norm", "mean_std_norm"]
) -> np.ndarray:
    """[S] float: A_intra of each step's node. returns: [E] R_i.

    Nodes are `batch.origin` values (< S); a step's predecessor node is the node of the step before it in
    its episode, or the virtual start S + (root episode of its tree) at t = 0."""
    steps = batch.num_steps
    node = batch.origin
    value = merge_shared(returns[batch.episode], batch)  # V(node), on every row of the node
    predecessor = np.where(batch.step > 0, np.roll(node, 1), steps + tree_of(batch)[batch.episode])
    original = ~batch.shared_copy
    # successors of each predecessor: distinct nodes, counted once each (originals only)
    successors = np.bincount(predecessor[original], minlength=steps + batch.num_episodes)
    branching = successors[predecessor] >= 2
    compared = original & branching
    intra_of_node = np.zeros(steps)
    intra_of_node[node[compared]] = group_normalise(value[compared], predecessor[compared], mode)
    intra = np.zeros(steps)
    for t in range(int(batch.step.max(initial=-1)) + 1):  # a chain inherits its head's comparison
        rows = np.flatnonzero(batch.step == t)
        inherit = rows[~branching[rows]]
        intra[rows] = intra_of_node[node[rows]]
        if t > 0:
            intra[inherit] = intra[inherit - 1]
    return intra
