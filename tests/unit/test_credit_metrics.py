"""Credit metrics and the state-key ids they and the estimators share."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import records_to_batch
from agentrl.credit.metrics import anchor_group_sizes, credit_metrics, zero_variance_group_fraction
from agentrl.credit.segments import combine_ids, group_key_ids
from agentrl.types import intern_keys


def episode(states: str, rewards: list[float], group: object = 0) -> dict:
    return {"group": group, "states": list(states), "rewards": rewards}


RECORDS = [
    episode("ABZ", [0.0, 1.0], "x"),
    episode("ACZ", [0.0, 0.0], "x"),
    episode("AZ", [1.0], "y"),
    episode("BZ", [1.0], "y"),
]


def test_credit_metrics() -> None:
    batch = records_to_batch(RECORDS)
    metrics = credit_metrics(batch, np.array([1.0, 1.0, -1.0, -1.0, 0.0, 0.0]))
    # anchor groups: x/A (2 steps), x/B, x/C, y/A, y/B -> 2 of 6 steps are in a group of >= 2
    assert metrics == {
        "credit/zero_variance_groups": 0.5,
        "credit/anchor_hit_rate": pytest.approx(2 / 6),
        "credit/anchor_group_size": pytest.approx(6 / 5),
        "credit/advantage_mean": 0.0,
        "credit/advantage_std": pytest.approx(np.sqrt(4 / 6)),
    }
    assert sorted(anchor_group_sizes(batch).tolist()) == [1, 1, 1, 1, 2]


def test_zero_variance_counts_the_invalid_penalty() -> None:
    records = [
        {"group": 0, "states": ["a", "b"], "rewards": [1.0], "valid": [False]},
        {"group": 0, "states": ["a", "b"], "rewards": [1.0], "valid": [True]},
    ]
    batch = records_to_batch(records)
    assert zero_variance_group_fraction(batch) == 0.0
    assert zero_variance_group_fraction(batch, invalid_penalty=0.0) == 1.0


def test_empty_batch_metrics_are_zero() -> None:
    metrics = credit_metrics(records_to_batch([]), np.zeros(0))
    assert set(metrics.values()) == {0.0}


def test_group_key_ids_are_exact_per_group_and_none_is_unique() -> None:
    keys = ["a", "a", "b", None, None, -1, -2, (1, 2), (1, 2)]
    groups = np.array([0, 1, 0, 0, 0, 0, 0, 0, 0])
    ids = group_key_ids(intern_keys(keys), groups)
    assert ids[0] != ids[1] and ids[7] == ids[8]
    assert ids[3] != ids[4] and ids[5] != ids[6]
    assert len(set(ids.tolist())) == 8


def test_combine_ids() -> None:
    ids = combine_ids(np.array([0, 0, 1, 1]), np.array([2, 2, 2, 0]))
    assert ids[0] == ids[1] and len(set(ids.tolist())) == 3
