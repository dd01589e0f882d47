"""Credit assignment: turn grouped episodes into one advantage per step (see docs CREDIT.md).

What this is: the literal registry of estimators — each `fn(batch: StepBatch, config) -> np.ndarray[S]`
paired with its frozen config class — plus `estimate` (by name, on a StepBatch) and the record API
`estimate_records` (by name, on plain dicts), which every estimator supports so it can be checked on small
hand-made cases.

What this is not: a trainer. Estimators are pure: no model, no I/O; the trainer broadcasts each step's
advantage over that step's sampled tokens.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agentrl.credit.batch import episodes_to_batch, records_to_batch, split_by_episode
from agentrl.credit.gdpo import GDPOConfig, gdpo
from agentrl.credit.gigpo import GiGPOConfig, gigpo
from agentrl.credit.grpo import DrGRPOConfig, GRPOConfig, RLOOConfig, grpo, rloo
from agentrl.credit.hgpo import HGPOConfig, hgpo
from agentrl.credit.igpo import IGPOConfig, igpo
from agentrl.credit.mc_grpo import MCGRPOConfig, mc_grpo
from agentrl.credit.salt import SALTConfig, salt
from agentrl.errors import ConfigError
from agentrl.types import StepBatch

Estimator = Callable[[StepBatch, Any], np.ndarray]

ESTIMATORS: dict[str, tuple[Estimator, type[Any]]] = {
    "grpo": (grpo, GRPOConfig),
    "drgrpo": (grpo, DrGRPOConfig),
    "rloo": (rloo, RLOOConfig),
    "mc_grpo": (mc_grpo, MCGRPOConfig),
    "gdpo": (gdpo, GDPOConfig),
    "gigpo": (gigpo, GiGPOConfig),
    "hgpo": (hgpo, HGPOConfig),
    "salt": (salt, SALTConfig),
    "igpo": (igpo, IGPOConfig),
}


def make_config(name: str, **options: Any) -> Any:
    """The config of estimator `name` built from keyword options; unknown names or keys -> ConfigError."""
    if name not in ESTIMATORS:
        raise ConfigError(f"unknown credit estimator {name!r}; choose one of {', '.join(sorted(ESTIMATORS))}")
    config_cls = ESTIMATORS[name][1]
    valid = sorted(field.name for field in dataclasses.fields(config_cls))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"estimator {name!r} has no option(s) {unknown}; valid options: {', '.join(valid)}")
    hints = typing.get_type_hints(config_cls)
    return config_cls(**{key: _coerce(hints[key], value) for key, value in options.items()})


def _coerce(hint: Any, value: Any) -> Any:
    """Accept what YAML/CLI overrides produce: `gamma=1` as 1.0, `"1e-3"` as 0.001, a list as a tuple."""
    if hint is float and isinstance(value, int | str) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"credit option must be a number, got {value!r}") from None
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def estimate(name: str, batch: StepBatch, **options: Any) -> np.ndarray:
    """[S] float advantages of every step in `batch` under estimator `name`."""
    config = make_config(name, **options)
    if batch.num_steps == 0:
        return np.zeros(0, dtype=np.float64)
    return np.asarray(ESTIMATORS[name][0](batch, config), dtype=np.float64)


def estimate_records(name: str, records: Sequence[Mapping[str, Any]], **options: Any) -> list[list[float]]:
    """The record API: adv[i][t] for episode i, step t (record keys and option names in CREDIT.md)."""
    batch = records_to_batch(records)
    return split_by_episode(estimate(name, batch, **options), batch)


__all__ = [
    "ESTIMATORS",
    "DrGRPOConfig",
    "GDPOConfig",
    "GRPOConfig",
    "GiGPOConfig",
    "HGPOConfig",
    "IGPOConfig",
    "MCGRPOConfig",
    "RLOOConfig",
    "SALTConfig",
    "episodes_to_batch",
    "estimate",
    "estimate_records",
    "make_config",
    "records_to_batch",
    "split_by_episode",
]
