"""GDPO (arXiv 2601.05242): several reward components, normalised per component, then whitened batch-wide.

    A_i = whiten_batch( sum_c w_c * normalise_group(R_i^c) )

where R_i^c is episode i's return of reward component c, `normalise_group` is the GRPO z-score within the
task group (unbiased std + 1e-6; singleton and all-equal groups give 0), and `whiten_batch` z-scores the
weighted sum over every episode of the batch (`episode_stats="steps"`: over every step sample). Normalising
each component separately keeps a high-variance component from drowning the others.

Components come from `StepBatch.reward_components` ([S, C]); without them the env reward is the single
component (and GDPO is GRPO followed by a batch-wide whitening). The invalid-action penalty is subtracted
from component 0, the task reward (our choice; the paper has no invalid-action penalty).

What this is not: a reward function; envs report the components per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.credit.common import EPISODE_STATS, check_choice, group_normalise
from agentrl.errors import ConfigError
from agentrl.types import StepBatch


@dataclass(frozen=True)
class GDPOConfig:
    """Options of GDPO.

    weights:         one weight per reward component; empty means 1 for every component.
    episode_stats:   "trajectory" whitens over episodes; "steps" over step samples.
    invalid_penalty: subtracted from component 0 at every unparsable step, before returns.
    """

    weights: tuple[float, ...] = ()
    episode_stats: Literal["trajectory", "steps"] = "trajectory"
    invalid_penalty: float = 0.1

    def __post_init__(self) -> None:
        check_choice("episode_stats", self.episode_stats, EPISODE_STATS)
        object.__setattr__(self, "weights", tuple(float(weight) for weight in self.weights))


def gdpo(batch: StepBatch, config: GDPOConfig) -> np.ndarray:
    """[S] float: the batch-whitened weighted sum of the per-component group-normalised returns."""
    components = reward_components(batch, config.invalid_penalty)
    weights = _weights(config.weights, components.shape[1])
    returns = np.stack(
        [np.bincount(batch.episode, weights=column, minlength=batch.num_episodes) for column in components.T],
        axis=1,
    )
    combined = sum(
        weight * group_normalise(returns[:, c], batch.group, "mean_std_norm")
        for c, weight in enumerate(weights)
    )
    per_episode = np.asarray(combined, dtype=np.float64)
    if config.episode_stats == "steps":
        return _whiten(per_episode[batch.episode])
    return _whiten(per_episode)[batch.episode]


def reward_components(batch: StepBatch, invalid_penalty: float) -> np.ndarray:
    """[S, C] float: the batch's reward components (or the env reward as one), penalty on component 0."""
    if batch.reward_components is None:
        components = np.asarray(batch.rewards, dtype=np.float64)[:, None].copy()
    else:
        components = np.asarray(batch.reward_components, dtype=np.float64).reshape(batch.num_steps, -1).copy()
    components[:, 0] -= invalid_penalty * ~np.asarray(batch.valid, dtype=bool)
    return components


def _weights(weights: tuple[float, ...], count: int) -> tuple[float, ...]:
    if not weights:
        return (1.0,) * count
    if len(weights) != count:
        raise ConfigError(
            f"credit weights has {len(weights)} entries but the batch has {count} reward components"
        )
    return weights


def _whiten(values: np.ndarray) -> np.ndarray:
    """Z-score over the whole array (unbiased std + 1e-6); fewer than two or all-equal values give 0."""
    return group_normalise(values, np.zeros(values.size, dtype=np.int64), "mean_std_norm")
