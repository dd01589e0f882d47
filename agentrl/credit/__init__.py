"""Credit assignment: turn grouped episodes into one advantage per step (definitions: docs/credit.md).

What this is: the literal registry of estimators, each an `EstimatorEntry`: the function
`fn(batch: StepBatch, config) -> np.ndarray[S]`, its frozen config class, and what it `needs` attached to the
episodes before it runs (IGPO's answer probabilities; the trainer prepares them, so its loop names no
estimator). Plus `make_config` (options -> typed config, once per run), `estimate` (by name, on a StepBatch)
and the record API `estimate_records` (by name, on plain dicts), which every estimator supports so it can
be checked on small hand-made cases.

What this is not: a trainer. Estimators are pure: no model, no I/O; the trainer broadcasts each step's
advantage over that step's sampled tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentrl.credit.batch import copies_by_episode, episodes_to_batch, records_to_batch, split_by_episode
from agentrl.credit.gdpo import GDPOConfig, gdpo
from agentrl.credit.gigpo import GiGPOConfig, gigpo
from agentrl.credit.grpo import DrGRPOConfig, GRPOConfig, RLOOConfig, grpo, rloo
from agentrl.credit.hgpo import HGPOConfig, hgpo
from agentrl.credit.igpo import IGPOConfig, igpo
from agentrl.credit.mc_grpo import MCGRPOConfig, mc_grpo
from agentrl.credit.salt import SALTConfig, salt
from agentrl.credit.tree import merge_shared
from agentrl.credit.tree_grpo import TreeGRPOConfig, tree_grpo
from agentrl.errors import ConfigError
from agentrl.typed import build
from agentrl.types import StepBatch

Estimator = Callable[[StepBatch, Any], np.ndarray]
Need = Literal["answer_probs"]
"""What an estimator may need attached to the episodes before it runs; the trainer owns how each is made
(`agentrl.trainer.step.PREPARATIONS`). "answer_probs": `Turn.answer_prob`, the policy's probability of the
task's known answer before each turn (IGPO)."""


@dataclass(frozen=True)
class EstimatorEntry:
    """One estimator: its function, its typed config class, and what it needs from the episodes first."""

    fn: Estimator
    config: type[Any]
    needs: tuple[Need, ...] = ()


ESTIMATORS: dict[str, EstimatorEntry] = {
    "grpo": EstimatorEntry(grpo, GRPOConfig),
    "drgrpo": EstimatorEntry(grpo, DrGRPOConfig),
    "rloo": EstimatorEntry(rloo, RLOOConfig),
    "mc_grpo": EstimatorEntry(mc_grpo, MCGRPOConfig),
    "gdpo": EstimatorEntry(gdpo, GDPOConfig),
    "gigpo": EstimatorEntry(gigpo, GiGPOConfig),
    "hgpo": EstimatorEntry(hgpo, HGPOConfig),
    "salt": EstimatorEntry(salt, SALTConfig),
    "igpo": EstimatorEntry(igpo, IGPOConfig, needs=("answer_probs",)),
    "tree_grpo": EstimatorEntry(tree_grpo, TreeGRPOConfig),
}


def entry(name: str) -> EstimatorEntry:
    """The registry entry of estimator `name`; an unknown name -> ConfigError listing the known ones."""
    if name not in ESTIMATORS:
        raise ConfigError(f"unknown credit estimator {name!r}; choose one of {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name]


def make_config(name: str, **options: Any) -> Any:
    """The config of estimator `name` built from keyword options (YAML-style values coerced by the run
    config's own rules, `agentrl.typed.build`); unknown names or keys -> ConfigError."""
    config_cls = entry(name).config
    valid = sorted(field.name for field in dataclasses.fields(config_cls))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"estimator {name!r} has no option(s) {unknown}; valid options: {', '.join(valid)}")
    return build(config_cls, options, "credit.options")


def estimate(name: str, batch: StepBatch, config: Any = None, **options: Any) -> np.ndarray:
    """[S] float advantages of every step in `batch` under estimator `name`, with its typed `config`
    (e.g. a run config's `credit.settings`) or one built from keyword `options`.

    On a tree batch every estimator's values are merged per decision node (`tree.merge_shared`): a copied
    prefix step gets its original's advantage, the mean over the trajectories through it, and
    `batch.shared_copy` marks the copies the trainer must not train again (docs/credit.md, "Trees")."""
    settings = config if config is not None else make_config(name, **options)
    if batch.num_steps == 0:
        return np.zeros(0, dtype=np.float64)
    values = np.asarray(entry(name).fn(batch, settings), dtype=np.float64)
    return merge_shared(values, batch) if batch.is_tree else values


def estimate_records(name: str, records: Sequence[Mapping[str, Any]], **options: Any) -> list[list[float]]:
    """The record API: `adv[i][t]` for episode i, step t (record keys and option names in docs/credit.md)."""
    batch = records_to_batch(records)
    return split_by_episode(estimate(name, batch, **options), batch)


__all__ = [
    "ESTIMATORS",
    "EstimatorEntry",
    "DrGRPOConfig",
    "GDPOConfig",
    "GRPOConfig",
    "GiGPOConfig",
    "HGPOConfig",
    "IGPOConfig",
    "MCGRPOConfig",
    "RLOOConfig",
    "SALTConfig",
    "TreeGRPOConfig",
    "copies_by_episode",
    "episodes_to_batch",
    "estimate",
    "estimate_records",
    "entry",
    "make_config",
    "records_to_batch",
    "split_by_episode",
]
