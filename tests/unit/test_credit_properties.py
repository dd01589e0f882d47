"""Properties of every estimator, checked with hypothesis on generated grouped episodes.

Also checks the vectorised GiGPO, HGPO and SALT against plain dict-and-loop reference implementations
written straight from docs/credit.md.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.credit import ESTIMATORS, estimate_records, records_to_batch
from agentrl.credit.common import discounted_returns, episode_returns
from agentrl.credit.segments import group_key_ids
from agentrl.types import intern_keys

OPTIONS: dict[str, dict[str, Any]] = {name: {} for name in ESTIMATORS}
OPTIONS["gigpo"] = {"gamma": 0.9}
OPTIONS["hgpo"] = {"gamma": 0.9, "history": 2}
PROPERTY = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
STATES = st.sampled_from(["A", "B", "C", "D", "A", "B", "C", "D", None])  # None ~ 1 in 9: an unknown state
REWARDS = st.sampled_from([0.0, 0.5, 1.0])


@st.composite
def episode_records(draw: st.DrawFn, group: int, terminal_only: bool) -> dict[str, Any]:
    """One episode: 1-6 steps, states from a small alphabet so that anchors repeat."""
    steps = draw(st.integers(1, 6))

    def per_step(element: st.SearchStrategy[Any], size: int = steps) -> list[Any]:
        return draw(st.lists(element, min_size=size, max_size=size))

    rewards = per_step(REWARDS)
    if terminal_only:
        rewards = [0.0] * (steps - 1) + rewards[-1:]
    return {
        "group": f"g{group}",
        "states": per_step(STATES, steps + 1),
        "rewards": rewards,
        "valid": per_step(st.booleans()),
        "actions": per_step(st.sampled_from("xy")),
        "answer_probs": per_step(st.sampled_from([0.01, 0.2, 0.5, 0.9, 1.0])),
        "outcome": draw(REWARDS),
        "reward_components": per_step(st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=2)),
    }


@st.composite
def record_sets(draw: st.DrawFn, terminal_only: bool = False) -> list[dict[str, Any]]:
    """1-4 groups of 1-5 episodes each."""
    return [
        draw(episode_records(group, terminal_only))
        for group in range(draw(st.integers(1, 4)))
        for _ in range(draw(st.integers(1, 5)))
    ]


def flat(advantages: list[list[float]]) -> np.ndarray:
    return np.array([value for episode in advantages for value in episode])


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "steps"])
@PROPERTY
@given(records=record_sets())
def test_step_weight_zero_makes_gigpo_grpo(
    mode: str, episode_stats: str, records: list[dict[str, Any]]
) -> None:
    gigpo = estimate_records("gigpo", records, step_weight=0.0, mode=mode, episode_stats=episode_stats)
    grpo = estimate_records("grpo", records, mode=mode, episode_stats=episode_stats)
    assert gigpo == grpo


@PROPERTY
@given(records=record_sets(terminal_only=True))
def test_gamma_one_with_terminal_rewards_makes_every_step_return_the_episode_return(
    records: list[dict[str, Any]],
) -> None:
    batch = records_to_batch(records)
    returns = discounted_returns(batch, batch.rewards, 1.0)
    assert returns == pytest.approx(episode_returns(batch, batch.rewards)[batch.episode])


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@PROPERTY
@given(records=record_sets(), data=st.data())
def test_permuting_episodes_permutes_the_output(
    name: str, records: list[dict[str, Any]], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(records))))
    original = estimate_records(name, records, **OPTIONS[name])
    permuted = estimate_records(name, [records[i] for i in order], **OPTIONS[name])
    for position, index in enumerate(order):
        assert permuted[position] == pytest.approx(original[index], abs=1e-9)


@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - {"gdpo"}))
@PROPERTY
@given(records=record_sets())
def test_groups_do_not_influence_each_other(name: str, records: list[dict[str, Any]]) -> None:
    # GDPO is excluded on purpose: its final whitening is batch-wide by definition
    together = estimate_records(name, records, **OPTIONS[name])
    for group in {record["group"] for record in records}:
        rows = [i for i, record in enumerate(records) if record["group"] == group]
        alone = estimate_records(name, [records[i] for i in rows], **OPTIONS[name])
        for row, values in zip(rows, alone, strict=True):
            assert together[row] == pytest.approx(values, abs=1e-9)


@pytest.mark.parametrize("base", ["grpo", "drgrpo", "rloo"])
@PROPERTY
@given(records=record_sets())
def test_salt_without_shared_transitions_is_its_base(base: str, records: list[dict[str, Any]]) -> None:
    for i, record in enumerate(records):
        record["actions"] = [f"{i}:{t}" for t in range(len(record["rewards"]))]
    assert estimate_records("salt", records, base=base) == estimate_records(base, records)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@PROPERTY
@given(records=record_sets())
def test_outputs_are_finite_and_shaped_like_the_input(name: str, records: list[dict[str, Any]]) -> None:
    advantages = estimate_records(name, records, **OPTIONS[name])
    assert [len(a) for a in advantages] == [len(r["rewards"]) for r in records]
    assert np.isfinite(flat(advantages)).all()


# ---- reference implementations: straight from docs/credit.md, dicts and loops ---------------------------


def penalised(record: dict[str, Any], penalty: float = 0.1) -> list[float]:
    return [r - (0.0 if v else penalty) for r, v in zip(record["rewards"], record["valid"], strict=True)]


def step_returns(rewards: list[float], gamma: float) -> list[float]:
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def normalise(value: float, members: list[float], mode: str, ddof: int) -> float:
    if len(members) < 2 or min(members) == max(members):
        return 0.0
    centred = value - float(np.mean(members))
    return centred / (float(np.std(members, ddof=ddof)) + 1e-6) if mode == "mean_std_norm" else centred


def reference_gigpo(
    records: list[dict[str, Any]], gamma: float, omega: float, mode: str
) -> list[list[float]]:
    rewards = [penalised(r) for r in records]
    totals: dict[Any, list[float]] = defaultdict(list)
    anchors: dict[Any, list[float]] = defaultdict(list)
    returns = [step_returns(r, gamma) for r in rewards]
    for record, reward, ret in zip(records, rewards, returns, strict=True):
        totals[record["group"]].append(sum(reward))
        for t, value in enumerate(ret):
            if record["states"][t] is not None:
                anchors[(record["group"], record["states"][t])].append(value)
    out = []
    for record, reward, ret in zip(records, rewards, returns, strict=True):
        episode_term = normalise(sum(reward), totals[record["group"]], mode, 1)
        out.append(
            [
                episode_term
                + omega
                * (
                    0.0
                    if record["states"][t] is None
                    else normalise(value, anchors[(record["group"], record["states"][t])], mode, 1)
                )
                for t, value in enumerate(ret)
            ]
        )
    return out


def reference_hgpo(records: list[dict[str, Any]], gamma: float, history: int, mode: str) -> list[list[float]]:
    returns = [step_returns(penalised(r), gamma) for r in records]

    def key(record: dict[str, Any], t: int, k: int) -> Any:
        window = tuple(record["states"][t - k + 1 : t + 1])
        return None if None in window else (record["group"], window)

    members: dict[Any, list[float]] = defaultdict(list)
    for record, ret in zip(records, returns, strict=True):
        for t, value in enumerate(ret):
            for k in range(1, min(history + 1, t + 1) + 1):
                if key(record, t, k) is not None:
                    members[key(record, t, k)].append(value)
    out = []
    for record, ret in zip(records, returns, strict=True):
        row = []
        for t, value in enumerate(ret):
            items = []
            for k in range(1, min(history + 1, t + 1) + 1):
                group_key = key(record, t, k)
                a = 0.0 if group_key is None else normalise(value, members[group_key], mode, 0)
                if a != 0.0:
                    items.append(((k + 1.0), a))
            row.append(sum(w * a for w, a in items) / (sum(w for w, _ in items) + 1e-6))
        out.append(row)
    return out


def reference_salt(records: list[dict[str, Any]]) -> list[list[float]]:
    base = estimate_records("grpo", records)
    nodes: dict[Any, list[float]] = defaultdict(list)

    def node(record: dict[str, Any], t: int) -> Any:
        s, a, n = record["states"][t], record["actions"][t], record["states"][t + 1]
        return None if s is None or n is None else (record["group"], s, a, n)

    for i, record in enumerate(records):
        for t in range(len(record["rewards"])):
            if node(record, t) is not None:
                nodes[node(record, t)].append(base[i][t])
    return [
        [
            base[i][t] if node(r, t) is None else float(np.mean(nodes[node(r, t)]))
            for t in range(len(r["rewards"]))
        ]
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@PROPERTY
@given(records=record_sets())
def test_gigpo_matches_the_reference(mode: str, records: list[dict[str, Any]]) -> None:
    got = estimate_records("gigpo", records, gamma=0.9, step_weight=0.7, mode=mode)
    assert flat(got) == pytest.approx(flat(reference_gigpo(records, 0.9, 0.7, mode)), abs=1e-9)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("history", [0, 1, 3])
@PROPERTY
@given(records=record_sets())
def test_hgpo_matches_the_reference(mode: str, history: int, records: list[dict[str, Any]]) -> None:
    got = estimate_records("hgpo", records, gamma=0.9, history=history, mode=mode)
    assert flat(got) == pytest.approx(flat(reference_hgpo(records, 0.9, history, mode)), abs=1e-9)


@PROPERTY
@given(records=record_sets())
def test_salt_matches_the_reference(records: list[dict[str, Any]]) -> None:
    assert flat(estimate_records("salt", records)) == pytest.approx(flat(reference_salt(records)), abs=1e-9)


def test_discounted_returns_flat_path_for_very_uneven_lengths() -> None:
    # one long episode among many one-step ones: the padded table would be huge, so the flat scan runs
    rng = np.random.default_rng(10)
    records = [{"group": 0, "states": ["a"] * 3001, "rewards": rng.random(3000).tolist()}]
    records += [{"group": 1, "states": ["a", "b"], "rewards": [float(r)]} for r in rng.random(2000)]
    batch = records_to_batch(records)
    expected = [value for r in records for value in step_returns(r["rewards"], 0.9)]
    assert discounted_returns(batch, batch.rewards, 0.9) == pytest.approx(expected, rel=1e-12)


@PROPERTY
@given(
    keys=st.lists(st.sampled_from(["a", "b", "c", None, 0, (1, 2)]), max_size=40),
    data=st.data(),
)
def test_group_key_ids_equal_exactly_for_equal_pairs(keys: list[Any], data: st.DataObject) -> None:
    groups = data.draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys)))
    ids = group_key_ids(intern_keys(keys), np.array(groups, dtype=np.int64)).tolist()
    for i, j in itertools.combinations(range(len(keys)), 2):
        same = keys[i] is not None and keys[i] == keys[j] and groups[i] == groups[j]
        assert (ids[i] == ids[j]) == same
    assert sorted(set(ids)) == list(range(len(set(ids))))  # dense
