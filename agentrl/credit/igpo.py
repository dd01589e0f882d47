"""IGPO (arXiv 2510.14967): turn rewards from the information gain about a known answer.

Input per step: `answer_probs` p_t, the policy's probability of the teacher-forced answer before turn t
(p_0 before the first turn, p_t after turn t-1's observation), and per episode the `outcome` score.

    r_t = p_{t+1} - p_t                 for non-final turns  (gain="prob", default)
    r_t = log p_{t+1} - log p_t         for non-final turns  (gain="log_prob")
    r_{T-1} = outcome                   (format_error_score, default -2, when the final turn is invalid)

Normalisation within the task group, z-score with the population std + 1e-6: "joint" (default) pools all
non-zero gains and all outcomes; "separate" normalises gains and outcomes each with their own statistics.
Zero gains are left out of the statistics and stay 0; a pool of fewer than two, or of all-equal values,
gives 0. Then Ã_t = r̃_t + gamma * Ã_{t+1}, accumulated backwards within the episode (gamma = 1 default).

When the batch has no `outcome`, the final step's env reward is used as the outcome score.

What this is not: the measurement of p_t (that needs the model and lives in the trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import check_choice, discounted_returns, episode_offsets, group_normalise
from agentrl.errors import ConfigError
from agentrl.types import StepBatch

PROB_FLOOR = 1e-12  # log p of a probability that underflowed to 0


@dataclass(frozen=True)
class IGPOConfig:
    """Options of IGPO.

    gamma:              discount of the backward accumulation of turn advantages.
    norm:               "joint" (gains and outcomes pooled) or "separate".
    gain:               "prob" (p_{t+1} - p_t) or "log_prob" (log p_{t+1} - log p_t).
    format_error_score: the outcome of an episode whose final turn could not be parsed.
    """

    gamma: float = 1.0
    norm: Literal["joint", "separate"] = "joint"
    gain: Literal["prob", "log_prob"] = "prob"
    format_error_score: float = -2.0

    def __post_init__(self) -> None:
        check_choice("norm", self.norm, ("joint", "separate"))
        check_choice("gain", self.gain, ("prob", "log_prob"))
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"credit gamma must be in [0, 1], got {self.gamma}")


def igpo(batch: StepBatch, config: IGPOConfig) -> np.ndarray:
    """[S] float: the backward-accumulated normalised turn rewards (see the module docstring)."""
    rewards, is_final = turn_rewards(batch, config)
    in_pool = is_final | (rewards != 0.0)
    groups = batch.group[batch.episode]
    if config.norm == "separate":
        groups = 2 * groups + is_final
    normalised = np.zeros(batch.num_steps)
    normalised[in_pool] = group_normalise(rewards[in_pool], groups[in_pool], "mean_std_norm", unbiased=False)
    return discounted_returns(batch, normalised, config.gamma)


def turn_rewards(batch: StepBatch, config: IGPOConfig) -> tuple[np.ndarray, np.ndarray]:
    """([S] float r_t, [S] bool final turn): information gains, and the outcome score at final turns."""
    if batch.answer_probs is None:
        raise ConfigError(
            "IGPO needs answer_probs (p_t before each turn); the trainer must measure them, "
            "or give each record an 'answer_probs' list"
        )
    probs = np.asarray(batch.answer_probs, dtype=np.float64)
    if config.gain == "log_prob":
        probs = np.log(np.maximum(probs, PROB_FLOOR))
    nonempty = batch.lengths > 0
    last = (episode_offsets(batch) + batch.lengths - 1)[nonempty]
    is_final = np.zeros(batch.num_steps, dtype=bool)
    is_final[last] = True
    rewards = np.zeros(batch.num_steps)
    rows = np.flatnonzero(~is_final)
    rewards[rows] = probs[rows + 1] - probs[rows]
    outcome = batch.rewards[last] if batch.outcome is None else np.asarray(batch.outcome)[nonempty]
    rewards[last] = np.where(batch.valid[last], outcome, config.format_error_score)
    return rewards, is_final
