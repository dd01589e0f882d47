"""SALT (arXiv 2510.20022): episode advantages averaged over the merged trajectory graph of a task group.

No public code exists; this follows docs/credit.md's reading of the paper. Compute the base episode advantage
(GRPO by default, Dr.GRPO or RLOO). A step is the transition (states[t], actions[t], states[t+1]); every
occurrence of the same transition within one task group — across episodes and within one — is one node of
the graph, and each occurrence gets the mean of the base advantages of all occurrences of its node:

    A(i,t) = mean over occurrences (j,u) of node(i,t) of A_base(j)

A transition seen once keeps its episode's advantage, so shared neutral steps of successful and failed paths
move toward 0 while decisive steps keep their sign. A transition touching a `None` state never merges.

Trees (docs/credit.md "Trees"): a branch's copied prefix steps ARE their original's node, by the tree
links (`StepBatch.origin`), not by key equality, so the shared prefix merges exactly even with `None` state
keys; each trajectory through a node is one occurrence of it (the original and its k copies: k + 1).

What this is not: a graph library; the "graph" is a dense id per (group, state, action, next state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import EPISODE_STATS, check_choice
from agentrl.credit.grpo import DrGRPOConfig, GRPOConfig, RLOOConfig, grpo
from agentrl.credit.segments import action_ids, combine_ids, step_state_ids
from agentrl.errors import ConfigError
from agentrl.types import StepBatch

BASES: dict[str, type[GRPOConfig]] = {"grpo": GRPOConfig, "drgrpo": DrGRPOConfig, "rloo": RLOOConfig}


@dataclass(frozen=True)
class SALTConfig:
    """Options of SALT.

    base:            the episode-level estimator whose advantages are averaged: "grpo", "drgrpo" or "rloo"
                     (each with its own default `mode`).
    episode_stats:   "trajectory" or "steps" for the base estimator.
    invalid_penalty: subtracted from the reward of every unparsable step, before returns.
    """

    base: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1

    def __post_init__(self) -> None:
        check_choice("base", self.base, tuple(BASES))
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)


def salt(batch: StepBatch, config: SALTConfig) -> np.ndarray:
    """[S] float: each step's base advantage averaged over all occurrences of its transition."""
    base_config = BASES[config.base](
        episode_stats=config.episode_stats, invalid_penalty=config.invalid_penalty
    )
    base = grpo(batch, base_config)
    nodes = transition_ids(batch)
    counts = np.bincount(nodes)
    return (np.bincount(nodes, weights=base) / counts)[nodes]


def transition_ids(batch: StepBatch) -> np.ndarray:
    """[S] dense int: equal exactly for equal (task group, state, action, next state) transitions."""
    actions = action_ids(batch)
    if actions is None:
        raise ConfigError(
            "SALT merges (state, action, next state) transitions and needs each step's action; "
            "give the records an 'actions' list (episodes_to_batch fills it from the turns)"
        )
    before, after = step_state_ids(batch)
    nodes = combine_ids(before, actions, after)
    return nodes[batch.origin] if batch.is_tree else nodes
