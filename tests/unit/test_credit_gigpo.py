"""GiGPO through the record API: docs/credit.md Example G1, anchor edge cases, similarity anchors."""

from __future__ import annotations

import pytest

from agentrl.credit import estimate_records, records_to_batch
from agentrl.credit.gigpo import anchor_ids, similarity_anchor_ids
from agentrl.errors import ConfigError


def episode(states: str | list[object], rewards: list[float], group: object = 0, **extra: object) -> dict:
    return {"group": group, "states": list(states), "rewards": rewards, **extra}


EXAMPLE_G1 = [
    episode("ABCZ", [0.0, 0.0, 1.0]),
    episode("ABBY", [0.0, 0.0, 0.0]),
    episode("ADBCZ", [0.0, 0.0, 0.0, 1.0]),
]


def test_example_g1_trajectory_mean_norm() -> None:
    advantages = estimate_records("gigpo", EXAMPLE_G1, gamma=0.95, step_weight=1.0, mode="mean_norm")
    assert advantages[0] == pytest.approx([0.649208, 0.808333, 0.333333], abs=1e-5)
    assert advantages[1] == pytest.approx([-1.253292, -1.141667, -1.141667], abs=1e-5)
    assert advantages[2] == pytest.approx([0.604083, 0.333333, 0.808333, 0.333333], abs=1e-5)


def test_example_g1_steps_mean_std_norm() -> None:
    advantages = estimate_records(
        "gigpo", EXAMPLE_G1, gamma=0.95, step_weight=1.0, mode="mean_std_norm", episode_stats="steps"
    )
    assert advantages[0] == pytest.approx([1.242206, 1.487082, 0.621058], abs=1e-5)
    assert advantages[1] == pytest.approx([-2.602696, -2.315158, -2.315158], abs=1e-5)
    assert advantages[2] == pytest.approx([1.153471, 0.621058, 1.487082, 0.621058], abs=1e-5)


def test_defaults_are_the_documented_ones() -> None:
    explicit = estimate_records("gigpo", EXAMPLE_G1, gamma=0.95, step_weight=1.0, mode="mean_norm")
    assert estimate_records("gigpo", EXAMPLE_G1) == explicit


def test_state_revisited_within_one_episode_of_a_singleton_group() -> None:
    # one episode: no episode term; A at t=0 and t=2 form an anchor group with R_t = 0.25 and 1.0
    advantages = estimate_records("gigpo", [episode("ABAZ", [0.0, 0.0, 1.0])], gamma=0.5)
    assert advantages == [pytest.approx([-0.375, 0.0, 0.375])]


def test_all_equal_and_singleton_groups_give_zero() -> None:
    records = [
        episode("AB", [1.0], group="alone"),
        *(episode("ABC", [0.0, 1.0], group="same") for _ in range(3)),
    ]
    assert estimate_records("gigpo", records) == [[0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]


def test_one_step_episodes_reduce_to_the_episode_term_twice() -> None:
    # every one-step episode shares the start state, so the anchor term equals the (mean_norm) episode term
    records = [episode("AZ", [reward]) for reward in (1.0, 0.0, 0.0, 1.0)]
    assert estimate_records("gigpo", records) == [[1.0], [-1.0], [-1.0], [1.0]]


def test_invalid_penalty_enters_before_the_returns() -> None:
    records = [
        episode("ABZ", [0.0, 1.0], valid=[True, True]),
        episode("ABZ", [0.0, 1.0], valid=[False, True]),
    ]
    advantages = estimate_records("gigpo", records, gamma=1.0)
    assert advantages == [pytest.approx([0.1, 0.05]), pytest.approx([-0.1, -0.05])]
    assert estimate_records("gigpo", records, gamma=1.0, invalid_penalty=0.0) == [[0.0, 0.0], [0.0, 0.0]]


def test_anchors_never_cross_task_groups() -> None:
    records = [episode("AZ", [1.0], group="x"), episode("AZ", [0.0], group="y")]
    batch = records_to_batch(records)
    assert anchor_ids(batch)[0] != anchor_ids(batch)[1]
    assert estimate_records("gigpo", records) == [[0.0], [0.0]]


def test_none_states_never_anchor() -> None:
    records = [episode([None, None], [1.0]), episode([None, None], [0.0])]
    # only the episode term (mean_norm): +-0.5
    assert estimate_records("gigpo", records) == [[0.5], [-0.5]]


def test_unhashable_free_keys_of_any_type() -> None:
    records = [episode([(1, "a"), -1, 9], [0.0, 1.0]), episode([(1, "a"), -2, 9], [0.0, 0.0])]
    # hash(-1) == hash(-2) in CPython: the exact fallback must keep them apart
    batch = records_to_batch(records)
    ids = anchor_ids(batch)
    assert ids[0] == ids[2] and ids[1] != ids[3]


def test_similarity_anchors_merge_near_identical_text_states() -> None:
    long_a = "the board: " + "x" * 60 + " turn 1"
    long_b = "the board: " + "x" * 60 + " turn 2"
    records = [episode([long_a, "end"], [1.0]), episode([long_b, "end"], [0.0])]
    batch = records_to_batch(records)
    merged = similarity_anchor_ids(batch, threshold=0.95)
    assert merged[0] == merged[1] and anchor_ids(batch)[0] != anchor_ids(batch)[1]
    exact = estimate_records("gigpo", records)
    similar = estimate_records("gigpo", records, similarity_anchors=True)
    assert exact == [[0.5], [-0.5]] and similar == [[1.0], [-1.0]]
    strict = estimate_records("gigpo", records, similarity_anchors=True, similarity_threshold=1.0)
    assert strict == exact


def test_similarity_clusters_join_the_first_leader_in_order() -> None:
    # "aaaa" founds a cluster; "aaab" (ratio 0.75) joins it; "aabb" is 0.5 from the leader: a new cluster
    records = [episode([state, "end"], [0.0]) for state in ("aaaa", "aaab", "aabb")]
    ids = similarity_anchor_ids(records_to_batch(records), threshold=0.7)
    assert ids[0] == ids[1] != ids[2]


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="gamma"):
        estimate_records("gigpo", EXAMPLE_G1, gamma=1.5)
    with pytest.raises(ConfigError, match="mean_std_norm"):
        estimate_records("gigpo", EXAMPLE_G1, mode="zscore")
    with pytest.raises(ConfigError, match="step_weight"):
        estimate_records("gigpo", EXAMPLE_G1, omega=1.0)


def test_yaml_style_option_values_are_coerced() -> None:
    # `credit.options.gamma=1` arrives as int 1, `1e-1` (YAML 1.1) as a string
    assert estimate_records("gigpo", EXAMPLE_G1, gamma=1, invalid_penalty="1e-1") == estimate_records(
        "gigpo", EXAMPLE_G1, gamma=1.0, invalid_penalty=0.1
    )


def test_selected_from_the_run_config() -> None:
    from agentrl.config import load_config
    from agentrl.credit import estimate

    config = load_config(
        "calc", ["credit.estimator=gigpo", "credit.options.gamma=0.95", "credit.options.step_weight=1"]
    )
    batch = records_to_batch(EXAMPLE_G1)
    advantages = estimate(config.credit.estimator, batch, **dict(config.credit.options))
    assert advantages.tolist() == pytest.approx(sum(estimate_records("gigpo", EXAMPLE_G1), []))


# Two-part episodes (python call, then submit) with a fresh window per part: both parts start in a state the
# group shares (S1, S2), and the env pays a part on its submit turn (steps 1 and 3). Ep1 gets part 1 right,
# Ep2 part 2; both return 1, so the episode term is 0 and only the step term can credit anything.
TWO_PARTS = [
    episode(["S1", "x1", "S2", "y1", "E1"], [0.0, 1.0, 0.0, 0.0], boundaries=[False, True, False, False]),
    episode(["S1", "x2", "S2", "y2", "E2"], [0.0, 0.0, 0.0, 1.0], boundaries=[False, True, False, False]),
]


def test_a_parts_return_credits_the_call_before_the_paid_turn() -> None:
    by_part = estimate_records("gigpo", TWO_PARTS, gamma=1.0, step_return="part")
    # R_t per part: Ep1 [1, 1, 0, 0], Ep2 [0, 0, 1, 1]; anchors S1 {1, 0} and S2 {0, 1}, mean_norm
    assert by_part == [pytest.approx([0.5, 0.0, -0.5, 0.0]), pytest.approx([-0.5, 0.0, 0.5, 0.0])]
    # to the episode's end: R_t Ep1 [1, 1, 0, 0], Ep2 [1, 1, 1, 1]: S1's returns are equal, part 1 uncredited
    to_end = estimate_records("gigpo", TWO_PARTS, gamma=1.0)
    assert to_end == [pytest.approx([0.0, 0.0, -0.5, 0.0]), pytest.approx([0.0, 0.0, 0.5, 0.0])]
    # gamma 0: R_t = r_t, 0 on every python call, so no step term anywhere
    assert estimate_records("gigpo", TWO_PARTS, gamma=0.0) == [[0.0] * 4, [0.0] * 4]


def test_a_parts_return_needs_the_records_boundaries() -> None:
    plain = [{key: value for key, value in record.items() if key != "boundaries"} for record in TWO_PARTS]
    with pytest.raises(ConfigError, match="boundaries"):
        estimate_records("gigpo", plain, step_return="part")
    with pytest.raises(ConfigError, match="step_return"):
        estimate_records("gigpo", TWO_PARTS, step_return="turn")
    with pytest.raises(ConfigError, match="boundaries must have one entry per step"):
        estimate_records("gigpo", [{**TWO_PARTS[0], "boundaries": [True]}], step_return="part")
