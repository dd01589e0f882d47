"""IGPO through the record API: docs/credit.md Example I1, gains, normalisation modes and edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import estimate_records
from agentrl.errors import ConfigError


def episode(probs: list[float], outcome: float, group: object = 0, **extra: object) -> dict:
    steps = len(probs)
    return {
        "group": group,
        "states": ["s"] * (steps + 1),
        "rewards": [0.0] * steps,
        "answer_probs": probs,
        "outcome": outcome,
        **extra,
    }


EXAMPLE_I1 = [episode([0.1, 0.3, 0.6], 1.0), episode([0.1, 0.05], 0.0), episode([0.1, 0.2], 0.5)]


def zscore(values: list[float]) -> np.ndarray:
    array = np.array(values)
    return (array - array.mean()) / (array.std() + 1e-6)


def test_example_i1_joint() -> None:
    advantages = estimate_records("igpo", EXAMPLE_I1, gamma=1.0, norm="joint", gain="prob")
    assert advantages[0] == pytest.approx([1.847299, 2.123332, 2.102099], abs=1e-5)
    assert advantages[1] == pytest.approx([-1.889766, -0.870566], abs=1e-5)
    assert advantages[2] == pytest.approx([0.042467, 0.615766], abs=1e-5)
    assert estimate_records("igpo", EXAMPLE_I1) == advantages


def test_separate_normalisation() -> None:
    gains = zscore([0.2, 0.3, -0.05, 0.1])
    outcomes = zscore([1.0, 0.0, 0.5])
    advantages = estimate_records("igpo", EXAMPLE_I1, norm="separate")
    assert advantages[0] == pytest.approx(
        [gains[0] + gains[1] + outcomes[0], gains[1] + outcomes[0], outcomes[0]], abs=1e-9
    )
    assert advantages[1] == pytest.approx([gains[2] + outcomes[1], outcomes[1]], abs=1e-9)


def test_log_prob_gain_and_discount() -> None:
    gains = [np.log(0.3 / 0.1), np.log(0.6 / 0.3), np.log(0.05 / 0.1), np.log(0.2 / 0.1)]
    pooled = zscore([*gains, 1.0, 0.0, 0.5])
    advantages = estimate_records("igpo", EXAMPLE_I1, gain="log_prob", gamma=0.5)
    assert advantages[0] == pytest.approx(
        [pooled[0] + 0.5 * pooled[1] + 0.25 * pooled[4], pooled[1] + 0.5 * pooled[4], pooled[4]], abs=1e-9
    )


def test_zero_gains_stay_out_of_the_statistics() -> None:
    records = [episode([0.2, 0.2], 1.0), episode([0.2, 0.2], 0.0)]
    # gains are 0 -> only the outcomes {1, 0} are pooled: +-1 (population std 0.5)
    value = 0.5 / (0.5 + 1e-6)
    assert estimate_records("igpo", records) == [
        pytest.approx([value, value]),
        pytest.approx([-value, -value]),
    ]


def test_format_error_scores_minus_two() -> None:
    records = [episode([0.5], 1.0), episode([0.5], 1.0, valid=[False])]
    pooled = zscore([1.0, -2.0])
    assert estimate_records("igpo", records) == [pytest.approx([pooled[0]]), pytest.approx([pooled[1]])]
    custom = zscore([1.0, 0.0])
    got = estimate_records("igpo", records, format_error_score=0.0)
    assert got == [pytest.approx([custom[0]]), pytest.approx([custom[1]])]


def test_singleton_and_all_equal_groups() -> None:
    records = [episode([0.5], 1.0, group="alone"), *(episode([0.5], 0.5, group="same") for _ in range(3))]
    assert estimate_records("igpo", records) == [[0.0], [0.0], [0.0], [0.0]]


def test_a_one_episode_group_still_normalises_its_pool_of_turn_rewards() -> None:
    # the pool is turns, not episodes: gain 0.3 and outcome 1.0 are two members -> z-scores -1 and +1
    advantages = estimate_records("igpo", [episode([0.1, 0.4], 1.0)])
    pooled = zscore([0.3, 1.0])
    assert advantages == [pytest.approx([pooled[0] + pooled[1], pooled[1]])]


def test_outcome_defaults_to_the_final_reward() -> None:
    records = [
        {"group": 0, "states": ["s", "t"], "rewards": [1.0], "answer_probs": [0.5]},
        {"group": 0, "states": ["s", "t"], "rewards": [0.0], "answer_probs": [0.5]},
    ]
    value = 0.5 / (0.5 + 1e-6)
    assert estimate_records("igpo", records) == [pytest.approx([value]), pytest.approx([-value])]


def test_answer_probs_are_required() -> None:
    with pytest.raises(ConfigError, match="answer_probs"):
        estimate_records("igpo", [{"group": 0, "states": ["a", "b"], "rewards": [1.0]}])
    with pytest.raises(ConfigError, match="joint"):
        estimate_records("igpo", EXAMPLE_I1, norm="both")
