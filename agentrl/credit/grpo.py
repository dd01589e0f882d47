"""The GRPO family: GRPO, Dr.GRPO and RLOO — episode-level advantages (docs/credit.md, "GRPO, Dr.GRPO, RLOO").

What this is: one estimator, `grpo(batch, config) -> [S]`, whose config selects the variant, and `rloo`,
the same computation under RLOO's defaults. Every step of an episode receives the episode's value.

    GRPO     (arXiv 2402.03300 sec. 4.1.2):  A_i = (R_i - mean_j R_j) / (std_j R_j + eps)
    Dr.GRPO  (arXiv 2503.20783):             A_i =  R_i - mean_j R_j        (plus a constant loss normaliser
                                                                              in the trainer)
    RLOO     (arXiv 2402.14740):             A_i =  R_i - mean_{j != i} R_j

R_i is the undiscounted episode return after the invalid-action penalty. std is unbiased (N-1); a group of
fewer than two members, or whose returns are all equal, gives 0.

What this is not: a step-level estimator (GiGPO, HGPO, SALT live in their own files) and not a loss.
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
)
from agentrl.types import StepBatch


@dataclass(frozen=True)
class GRPOConfig:
    """Options of the GRPO family.

    mode:            "mean_std_norm" divides by the group std (GRPO); "mean_norm" only centres (Dr.GRPO).
    episode_stats:   "trajectory" — one entry per episode in the group statistics (as in the papers);
                     "steps" — one entry per step, each carrying its episode's return (verl-agent's default,
                     which weights long episodes more).
    invalid_penalty: subtracted from the reward of every step whose turn did not parse, before returns.
    leave_one_out:   the baseline excludes the episode itself (RLOO).
    """

    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1
    leave_one_out: bool = False

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, NORM_MODES)
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)


@dataclass(frozen=True)
class DrGRPOConfig(GRPOConfig):
    """Dr.GRPO: GRPO without the std division."""

    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"


@dataclass(frozen=True)
class RLOOConfig(GRPOConfig):
    """RLOO: the leave-one-out mean as baseline, no std division."""

    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    leave_one_out: bool = True


def grpo(batch: StepBatch, config: GRPOConfig) -> np.ndarray:
    """[S] float: the episode-level advantage of each step's episode (see the module docstring)."""
    rewards = apply_invalid_penalty(batch.rewards, batch.valid, config.invalid_penalty)
    return episode_advantages(
        batch, rewards, config.mode, config.episode_stats, leave_one_out=config.leave_one_out
    )


def rloo(batch: StepBatch, config: RLOOConfig) -> np.ndarray:
    """[S] float: RLOO, A_i = R_i - mean_{j != i} R_j (with `RLOOConfig`'s defaults)."""
    return grpo(batch, config)
