"""GRPO, Dr.GRPO and RLOO through the record API: docs/credit.md Example A and hand-computed edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import ESTIMATORS, episodes_to_batch, estimate, estimate_records, split_by_episode
from agentrl.credit.common import discounted_returns, group_normalise
from agentrl.errors import ConfigError
from agentrl.types import Action, Episode, ToolCall, Turn


def one_step(group: object, reward: float, valid: bool = True) -> dict[str, object]:
    return {"group": group, "states": ["start", "end"], "rewards": [reward], "valid": [valid]}


def flat(advantages: list[list[float]]) -> list[float]:
    return [value for episode in advantages for value in episode]


EXAMPLE_A = [one_step("task", reward) for reward in (1.0, 0.0, 0.0, 1.0)]


@pytest.mark.parametrize(("name", "magnitude"), [("grpo", 0.866024), ("drgrpo", 0.5), ("rloo", 0.666667)])
def test_example_a(name: str, magnitude: float) -> None:
    advantages = flat(estimate_records(name, EXAMPLE_A))
    assert advantages == pytest.approx([magnitude, -magnitude, -magnitude, magnitude], abs=1e-6)


def test_invalid_penalty_is_subtracted_before_the_return() -> None:
    records = [
        {"group": 0, "states": ["a", "b", "c"], "rewards": [0.0, 1.0], "valid": [False, True]},
        {"group": 0, "states": ["a", "b", "c"], "rewards": [0.0, 1.0], "valid": [True, True]},
    ]
    # returns 0.9 and 1.0 -> Dr.GRPO: -0.05 and +0.05 on every step
    advantages = estimate_records("drgrpo", records, invalid_penalty=0.1)
    assert advantages == [pytest.approx([-0.05, -0.05]), pytest.approx([0.05, 0.05])]
    assert flat(estimate_records("drgrpo", records, invalid_penalty=0.0)) == [0.0] * 4


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
def test_singleton_and_all_equal_groups_give_exactly_zero(name: str) -> None:
    records = [one_step("alone", 1.0), *(one_step("same", 0.3) for _ in range(3))]
    assert flat(estimate_records(name, records)) == [0.0] * 4


def test_groups_do_not_mix() -> None:
    records = [one_step("x", 1.0), one_step("x", 0.0), one_step("y", 10.0), one_step("y", 20.0)]
    assert flat(estimate_records("drgrpo", records)) == pytest.approx([0.5, -0.5, -5.0, 5.0])


def test_group_labels_in_any_order() -> None:
    records = [one_step("y", 1.0), one_step("x", 0.0), one_step("y", 0.0), one_step("x", 2.0)]
    assert flat(estimate_records("drgrpo", records)) == pytest.approx([0.5, -1.0, -0.5, 1.0])


def test_every_step_of_an_episode_gets_the_episode_value() -> None:
    records = [
        {"group": 0, "states": list("abcd"), "rewards": [0.0, 0.0, 1.0]},
        {"group": 0, "states": list("ab"), "rewards": [0.0]},
    ]
    assert estimate_records("drgrpo", records) == [[0.5, 0.5, 0.5], [-0.5]]


def test_episode_stats_steps_weights_long_episodes() -> None:
    records = [
        {"group": 0, "states": list("abcd"), "rewards": [0.0, 0.0, 1.0]},
        {"group": 0, "states": list("ab"), "rewards": [0.0]},
    ]
    # step entries [1, 1, 1, 0]: mean 0.75, unbiased std 0.5
    advantages = estimate_records("grpo", records, episode_stats="steps")
    expected_high, expected_low = 0.25 / (0.5 + 1e-6), -0.75 / (0.5 + 1e-6)
    assert advantages == [pytest.approx([expected_high] * 3), pytest.approx([expected_low])]
    trajectory = estimate_records("grpo", records, episode_stats="trajectory")
    assert trajectory[0][0] == pytest.approx(0.5 / (np.sqrt(0.5) + 1e-6))


def test_leave_one_out_with_std() -> None:
    advantages = flat(estimate_records("grpo", EXAMPLE_A, leave_one_out=True))
    value = (2 / 3) / (np.std([1, 0, 0, 1], ddof=1) + 1e-6)
    assert advantages == pytest.approx([value, -value, -value, value])


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_empty_batch(name: str) -> None:
    assert estimate_records(name, []) == []


def test_unknown_estimator_and_option_list_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="grpo"):
        estimate_records("nope", EXAMPLE_A)
    with pytest.raises(ConfigError, match="invalid_penalty"):
        estimate_records("grpo", EXAMPLE_A, gamma_typo=0.9)
    with pytest.raises(ConfigError, match="mean_std_norm"):
        estimate_records("grpo", EXAMPLE_A, mode="zscore")


def test_malformed_records_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="states"):
        estimate_records("grpo", [{"group": 0, "states": ["a"], "rewards": [1.0]}])
    with pytest.raises(ConfigError, match="rewards"):
        estimate_records("grpo", [{"group": 0, "states": ["a"]}])


def test_discounted_returns_reverse_scan() -> None:
    records = [
        {"group": 0, "states": list("abcd"), "rewards": [1.0, 0.0, 2.0]},
        {"group": 0, "states": list("ab"), "rewards": [3.0]},
        {"group": 1, "states": list("abc"), "rewards": [0.0, 1.0]},
    ]
    from agentrl.credit import records_to_batch

    batch = records_to_batch(records)
    returns = discounted_returns(batch, batch.rewards, gamma=0.5)
    assert returns.tolist() == pytest.approx([1.0 + 0.25 * 2.0, 1.0, 2.0, 3.0, 0.5, 1.0])


def test_returns_stop_after_a_boundary_on_both_scans() -> None:
    from agentrl.credit import records_to_batch

    batch = records_to_batch([{"group": 0, "states": list("abcd"), "rewards": [1.0, 3.0, 2.0],
                               "boundaries": [False, True, False]}])  # fmt: skip
    assert discounted_returns(batch, batch.rewards, 0.5, batch.boundary).tolist() == [2.5, 3.0, 2.0]
    # the flat-row scan (one long episode among many short ones) against a plain loop
    rng = np.random.default_rng(0)
    lengths = [3000, *([1] * 9)]
    records = [
        {"group": 0, "states": ["s"] * (n + 1), "rewards": rng.normal(size=n).tolist(),
         "boundaries": (rng.random(n) < 0.2).tolist()}
        for n in lengths
    ]  # fmt: skip
    batch = records_to_batch(records)
    assert max(lengths) * len(lengths) > 4 * batch.num_steps + 1024  # so the flat scan runs
    expected: list[float] = []
    for record in records:
        tail = 0.0
        ours = []
        for reward, stop in zip(reversed(record["rewards"]), reversed(record["boundaries"]), strict=True):
            tail = reward + (0.0 if stop else 0.9 * tail)
            ours.append(tail)
        expected.extend(reversed(ours))
    assert discounted_returns(batch, batch.rewards, 0.9, batch.boundary) == pytest.approx(expected)


def test_group_normalise_population_std() -> None:
    values = np.array([1.0, 3.0, 5.0])
    out = group_normalise(values, np.zeros(3, dtype=int), "mean_std_norm", unbiased=False)
    assert out.tolist() == pytest.approx([-2 / (np.sqrt(8 / 3) + 1e-6), 0.0, 2 / (np.sqrt(8 / 3) + 1e-6)])


def make_turn(index: int, reward: float, invalid: bool = False) -> Turn:
    action = Action(text="x", tool_calls=(ToolCall("submit", {"answer": index}),))
    return Turn(index, (1,), (2,), (-0.1,), "x", action, "obs", reward, invalid, f"s{index + 1}")


def test_episodes_to_batch_round_trip() -> None:
    episodes = [
        Episode("e0", "env", "t", "g", 0, (make_turn(0, 0.0), make_turn(1, 1.0)), "terminated", "s0"),
        Episode("e1", "env", "t", "g", 1, (make_turn(0, 0.0, invalid=True),), "terminated", "s0"),
    ]
    batch = episodes_to_batch(episodes)
    assert batch.states == ("s0", "s1", "s2", "s0", "s1")
    assert batch.valid.tolist() == [True, True, False]
    assert batch.actions is not None and batch.actions[0] == batch.actions[2]
    advantages = split_by_episode(estimate("drgrpo", batch), batch)
    assert advantages == [pytest.approx([0.55, 0.55]), pytest.approx([-0.55])]
    assert batch.boundary is not None and not batch.boundary.any()  # no env boundary in these turns


def test_an_env_boundary_in_a_turns_info_is_the_batchs_part_boundary() -> None:
    from dataclasses import replace

    from agentrl.credit.batch import CONTEXT_RESET
    from agentrl.env.core import INFO_CONTEXT_RESET

    assert CONTEXT_RESET == INFO_CONTEXT_RESET  # credit keeps its own copy of the env's key

    turns = (replace(make_turn(0, 1.0), info={"context_reset": True}), make_turn(1, 0.0))
    batch = episodes_to_batch([Episode("e0", "env", "t", "g", 0, turns, "terminated", "s0")])
    assert batch.boundary is not None and batch.boundary.tolist() == [True, False]
