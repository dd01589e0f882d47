"""SALT through the record API: docs/credit.md Example S1, bases, revisits and edge cases."""

from __future__ import annotations

import pytest

from agentrl.credit import estimate_records
from agentrl.errors import ConfigError


def episode(states: str, actions: str, rewards: list[float], group: object = 0, **extra: object) -> dict:
    return {"group": group, "states": list(states), "actions": list(actions), "rewards": rewards, **extra}


EXAMPLE_S1 = [
    episode("ABS", "ab", [0.0, 1.0]),
    episode("ABF", "ac", [0.0, 0.0]),
    episode("AES", "de", [0.0, 1.0]),
    episode("ABF", "ac", [0.0, 0.0]),
]


def test_example_s1() -> None:
    advantages = estimate_records("salt", EXAMPLE_S1)
    assert advantages[0] == pytest.approx([-0.288675, 0.866024], abs=1e-5)
    assert advantages[1] == pytest.approx([-0.288675, -0.866024], abs=1e-5)
    assert advantages[2] == pytest.approx([0.866024, 0.866024], abs=1e-5)
    assert advantages[3] == pytest.approx([-0.288675, -0.866024], abs=1e-5)


def test_rloo_base() -> None:
    # RLOO on returns [1, 0, 1, 0]: +-2/3; (A,a,B) shared by +2/3, -2/3, -2/3 -> -2/9
    advantages = estimate_records("salt", EXAMPLE_S1, base="rloo")
    assert advantages[0] == pytest.approx([-2 / 9, 2 / 3])
    assert advantages[2] == pytest.approx([2 / 3, 2 / 3])


def test_the_action_and_the_next_state_are_part_of_the_transition() -> None:
    records = [episode("AB", "a", [1.0]), episode("AB", "b", [0.0]), episode("AC", "a", [0.0])]
    drgrpo = estimate_records("salt", records, base="drgrpo")
    assert drgrpo == [pytest.approx([2 / 3]), pytest.approx([-1 / 3]), pytest.approx([-1 / 3])]


def test_a_transition_repeated_within_one_episode_is_one_node() -> None:
    records = [episode("AAAB", "xxy", [0.0, 0.0, 1.0]), episode("AAB", "xy", [0.0, 0.0])]
    # Dr.GRPO base +-0.5; (A,x,A) occurs twice in episode 0 and once in 1: the mean over the three
    # occurrences is (0.5 + 0.5 - 0.5) / 3; (A,y,B) once in each -> 0
    advantages = estimate_records("salt", records, base="drgrpo")
    assert advantages == [pytest.approx([1 / 6, 1 / 6, 0.0]), pytest.approx([1 / 6, 0.0])]


def test_singleton_all_equal_and_one_step_groups() -> None:
    records = [
        episode("AB", "a", [1.0], group="alone"),
        *(episode("AB", "a", [0.3], group="same") for _ in range(2)),
    ]
    assert estimate_records("salt", records) == [[0.0], [0.0], [0.0]]


def test_invalid_penalty_through_the_base() -> None:
    records = [episode("AB", "a", [1.0], valid=[False]), episode("AC", "b", [1.0])]
    assert estimate_records("salt", records, base="drgrpo") == [pytest.approx([-0.05]), pytest.approx([0.05])]


def test_actions_are_required() -> None:
    with pytest.raises(ConfigError, match="actions"):
        estimate_records("salt", [{"group": 0, "states": ["A", "B"], "rewards": [1.0]}])
    with pytest.raises(ConfigError, match="base"):
        estimate_records("salt", EXAMPLE_S1, base="ppo")
