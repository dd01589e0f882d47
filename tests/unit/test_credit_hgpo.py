"""HGPO through the record API: docs/credit.md Example H1, levels, weights, the base group and edge cases."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from agentrl.credit import estimate_records, records_to_batch
from agentrl.credit.hgpo import history_levels
from agentrl.errors import ConfigError

hgpo_module = importlib.import_module("agentrl.credit.hgpo")  # the package re-exports a function `hgpo`


def episode(states: str, rewards: list[float], group: object = 0, **extra: object) -> dict:
    return {"group": group, "states": list(states), "rewards": rewards, **extra}


EXAMPLE_H1 = [
    episode("ABT", [0.0, 1.0]),
    episode("AEBT", [0.0, 0.0, 0.0]),
    episode("AEBT", [0.0, 0.0, 1.0]),
    episode("ABT", [0.0, 0.0]),
    episode("ABT", [0.0, 1.0]),
]


def test_example_h1_mean_norm() -> None:
    advantages = estimate_records("hgpo", EXAMPLE_H1, gamma=1.0, history=1, mode="mean_norm")
    expected = [[0.4, 0.36], [-0.6, -0.5, -0.54], [0.4, 0.5, 0.46], [-0.6, -0.64], [0.4, 0.36]]
    for got, want in zip(advantages, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-5)


def test_example_h1_mean_std_norm() -> None:
    advantages = estimate_records("hgpo", EXAMPLE_H1, gamma=1.0, history=1, mode="mean_std_norm")
    assert advantages[0] == pytest.approx([0.816495, 0.750861], abs=1e-5)
    assert advantages[1] == pytest.approx([-1.224742, -0.999998, -1.089896], abs=1e-5)
    assert advantages[3] == pytest.approx([-1.224742, -1.338423], abs=1e-5)


def test_alpha_zero_weights_levels_uniformly() -> None:
    advantages = estimate_records("hgpo", EXAMPLE_H1, gamma=1.0, history=1, mode="mean_norm", alpha=0.0)
    # tau2 t=2: level 1 (state B) -0.6, level 2 (history E B) -0.5
    assert advantages[1][2] == pytest.approx((-0.6 - 0.5) / 2, abs=1e-5)


def test_base_group_adds_the_episode_term_as_level_zero() -> None:
    advantages = estimate_records("hgpo", EXAMPLE_H1, gamma=1.0, history=1, mode="mean_norm", base_group=True)
    # tau1 t=1: episode term 0.4 (weight 1), level 1: 0.4 (weight 2), level 2: 1/3 (weight 3)
    assert advantages[0][1] == pytest.approx((0.4 + 2 * 0.4 + 3 / 3) / 6, abs=1e-5)
    assert advantages[0][0] == pytest.approx(0.4, abs=1e-5)


def test_history_zero_is_the_anchor_term_alone() -> None:
    hgpo = estimate_records("hgpo", EXAMPLE_H1, gamma=1.0, history=0, mode="mean_norm")
    gigpo = estimate_records("gigpo", EXAMPLE_H1, gamma=1.0, mode="mean_norm")
    drgrpo = estimate_records("drgrpo", EXAMPLE_H1)
    for h, g, e in zip(hgpo, gigpo, drgrpo, strict=True):
        assert h == pytest.approx(np.subtract(g, e).tolist(), abs=1e-5)


def test_longer_histories_split_groups() -> None:
    batch = records_to_batch(EXAMPLE_H1)
    level1, level2, level3 = history_levels(batch, 3)
    assert level1.size == batch.num_steps
    assert len(set(level1.tolist())) == 3  # A, B, E
    assert len(set(level2[batch.step >= 1].tolist())) == 3  # AB, AE, EB
    assert len(set(level3[batch.step >= 2].tolist())) == 1  # AEB twice
    assert len(history_levels(batch, 5)) == 3  # no episode has a fourth step


def test_singletons_all_equal_and_one_step_episodes() -> None:
    records = [episode("AZ", [1.0], group="alone"), *(episode("AZ", [0.5], group="same") for _ in range(3))]
    assert estimate_records("hgpo", records) == [[0.0]] * 4
    one_step = [episode("AZ", [reward]) for reward in (1.0, 0.0)]
    # population std of {1, 0} is 0.5: +-0.5 / (0.5 + 1e-6), then weight 2 / (2 + 1e-6)
    value = 0.5 / (0.5 + 1e-6) * 2 / (2 + 1e-6)
    assert estimate_records("hgpo", one_step) == [pytest.approx([value]), pytest.approx([-value])]


def test_revisits_within_one_episode() -> None:
    # single episode A B A B (then Z), gamma 1: R = [1, 1, 1, 1] -> all-equal; gamma 0.5 splits them
    advantages = estimate_records(
        "hgpo", [episode("ABABZ", [0.0, 0.0, 0.0, 1.0])], gamma=0.5, mode="mean_norm"
    )
    # R_t = [0.125, 0.25, 0.5, 1]; level 1: A {0.125, 0.5}, B {0.25, 1}; level 2: "AB" at t=1,3; "BA" once
    level1 = [-0.1875, -0.375, 0.1875, 0.375]
    level2 = [0.0, -0.375, 0.0, 0.375]
    expected = [(2 * a + 3 * b) / ((2 + (3 if b else 0)) + 1e-6) for a, b in zip(level1, level2, strict=True)]
    assert advantages == [pytest.approx(expected, abs=1e-6)]


def test_invalid_penalty() -> None:
    records = [episode("AZ", [1.0], valid=[False]), episode("AZ", [1.0], valid=[True])]
    advantages = estimate_records("hgpo", records, mode="mean_norm")
    assert advantages == [pytest.approx([-0.05], abs=1e-6), pytest.approx([0.05], abs=1e-6)]


def test_bad_history() -> None:
    with pytest.raises(ConfigError, match="history"):
        estimate_records("hgpo", EXAMPLE_H1, history=-1)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_one_sort_path_equals_the_level_by_level_path(
    mode: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random groups with revisited states, short episodes, invalid steps and unknown (None) states."""
    rng = np.random.default_rng(seed)
    records = []
    for group in range(6):
        for _ in range(int(rng.integers(1, 6))):
            length = int(rng.integers(1, 9))
            states: list[object] = [f"s{int(value)}" for value in rng.integers(0, 4, size=length + 1)]
            if rng.random() < 0.2:
                states[int(rng.integers(0, length + 1))] = None
            rewards = [float(value) for value in rng.integers(0, 3, size=length) / 2]
            valid = [bool(value) for value in rng.random(length) > 0.1]
            records.append(episode(states, rewards, group=group, valid=valid))  # type: ignore[arg-type]
    options = {"gamma": 0.9, "history": 2, "mode": mode, "base_group": bool(seed % 2)}
    assert hgpo_module.history_sort(records_to_batch(records), 3) is not None
    fast = estimate_records("hgpo", records, **options)
    monkeypatch.setattr(hgpo_module, "history_sort", lambda batch, max_level: None)
    slow = estimate_records("hgpo", records, **options)
    for got, want in zip(fast, slow, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
