"""MC-GRPO and GDPO through the record API: hand-computed values and edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import estimate_records
from agentrl.credit.mc_grpo import group_median
from agentrl.errors import ConfigError


def one_step(reward: float, group: object = 0, **extra: object) -> dict:
    return {"group": group, "states": ["s", "t"], "rewards": [reward], **extra}


def test_mc_grpo_median_and_mad() -> None:
    records = [one_step(reward) for reward in (1.0, 0.0, 0.5, 0.2, 1.0)]
    # median 0.5; |R - 0.5| = [0.5, 0.5, 0, 0.3, 0.5] -> MAD 0.5
    expected = [(reward - 0.5) / 0.501 for reward in (1.0, 0.0, 0.5, 0.2, 1.0)]
    assert [a[0] for a in estimate_records("mc_grpo", records)] == pytest.approx(expected)


def test_mc_grpo_binary_rewards_explode_as_documented() -> None:
    records = [one_step(reward) for reward in (1.0, 0.0, 0.0, 1.0, 1.0)]
    assert estimate_records("mc_grpo", records) == [[0.0], [-1000.0], [-1000.0], [0.0], [0.0]]
    tamed = estimate_records("mc_grpo", records, mad_eps=1.0)
    assert tamed == [[0.0], [-1.0], [-1.0], [0.0], [0.0]]


def test_mc_grpo_even_group_uses_the_mean_of_the_middle_pair() -> None:
    records = [one_step(reward) for reward in (0.0, 1.0, 2.0, 3.0)]
    # median 1.5, |R - 1.5| = [1.5, .5, .5, 1.5] -> MAD 1.0
    assert [a[0] for a in estimate_records("mc_grpo", records)] == pytest.approx(
        [-1.5 / 1.001, -0.5 / 1.001, 0.5 / 1.001, 1.5 / 1.001]
    )


def test_mc_grpo_singletons_all_equal_invalid() -> None:
    records = [one_step(1.0, "alone"), one_step(0.3, "same"), one_step(0.3, "same")]
    assert estimate_records("mc_grpo", records) == [[0.0], [0.0], [0.0]]
    penalised = [one_step(1.0, valid=[False]), one_step(1.0), one_step(0.0)]
    # returns [0.9, 1, 0]: median 0.9, deviations [0, .1, .9] -> MAD 0.1
    assert [a[0] for a in estimate_records("mc_grpo", penalised)] == pytest.approx(
        [0.0, 0.1 / 0.101, -0.9 / 0.101]
    )
    with pytest.raises(ConfigError, match="mad_eps"):
        estimate_records("mc_grpo", records, mad_eps=0.0)


def test_group_median_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=200)
    groups = rng.integers(0, 13, size=200)
    expected = [np.median(values[groups == g]) for g in range(13)]
    assert group_median(values, groups) == pytest.approx(expected)


def zscore(values: list[float]) -> np.ndarray:
    array = np.array(values)
    return (array - array.mean()) / (array.std(ddof=1) + 1e-6)


def test_gdpo_normalises_components_separately_then_whitens_the_batch() -> None:
    records = [
        one_step(1.0, 0, reward_components=[[1.0, 0.0]]),
        one_step(0.0, 0, reward_components=[[0.0, 1.0]]),
        one_step(1.0, 1, reward_components=[[1.0, 1.0]]),
        one_step(1.0, 1, reward_components=[[1.0, 0.0]]),
    ]
    half = zscore([1.0, 0.0])[0]
    expected = zscore([half - half, -half + half, half, -half])
    assert [a[0] for a in estimate_records("gdpo", records)] == pytest.approx(expected.tolist())
    weighted = zscore([2 * half - half, -2 * half + half, half, -half])
    got = [a[0] for a in estimate_records("gdpo", records, weights=[2.0, 1.0])]
    assert got == pytest.approx(weighted.tolist())


def test_gdpo_without_components_is_grpo_whitened() -> None:
    records = [
        one_step(reward, group) for group, reward in [(0, 1.0), (0, 0.0), (1, 3.0), (1, 1.0), (2, 5.0)]
    ]
    grpo = [a[0] for a in estimate_records("grpo", records)]
    assert [a[0] for a in estimate_records("gdpo", records)] == pytest.approx(zscore(grpo).tolist())


def test_gdpo_multi_step_and_edge_cases() -> None:
    records = [
        {"group": 0, "states": ["a", "b", "c"], "rewards": [0.0, 1.0], "reward_components": [[0, 1], [1, 0]]},
        {"group": 0, "states": ["a", "b"], "rewards": [0.0], "reward_components": [[0, 0]]},
    ]
    advantages = estimate_records("gdpo", records)
    assert advantages[0][0] == advantages[0][1] > 0 > advantages[1][0]
    assert estimate_records("gdpo", [one_step(1.0)]) == [[0.0]]
    with pytest.raises(ConfigError, match="weights"):
        estimate_records("gdpo", records, weights=[1.0])
