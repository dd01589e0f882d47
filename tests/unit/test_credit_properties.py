"""Properties of every estimator on seeded random batches (a numpy loop; hypothesis is not installed).

Also checks the vectorised GiGPO, HGPO and SALT against plain dict-and-loop reference implementations
written straight from CREDIT.md.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from agentrl.credit import ESTIMATORS, estimate_records, records_to_batch
from agentrl.credit.common import discounted_returns, episode_returns

CASES = 60
OPTIONS: dict[str, dict[str, Any]] = {name: {} for name in ESTIMATORS}
OPTIONS["gigpo"] = {"gamma": 0.9}
OPTIONS["hgpo"] = {"gamma": 0.9, "history": 2}


def random_records(rng: np.random.Generator, terminal_only: bool = False) -> list[dict[str, Any]]:
    """1-4 groups of 1-5 episodes, 1-6 steps, states from a small alphabet so that anchors repeat."""
    records = []
    for group in range(int(rng.integers(1, 5))):
        for _ in range(int(rng.integers(1, 6))):
            steps = int(rng.integers(1, 7))
            states: list[Any] = [str(s) for s in rng.choice(list("ABCD"), size=steps + 1)]
            if rng.random() < 0.1:
                states[int(rng.integers(0, steps + 1))] = None
            rewards = rng.choice([0.0, 0.5, 1.0], size=steps)
            if terminal_only:
                rewards[:-1] = 0.0
            records.append(
                {
                    "group": f"g{group}",
                    "states": states,
                    "rewards": rewards.tolist(),
                    "valid": (rng.random(steps) > 0.1).tolist(),
                    "actions": rng.choice(list("xy"), size=steps).tolist(),
                    "answer_probs": rng.uniform(0.01, 1.0, size=steps).round(2).tolist(),
                    "outcome": float(rng.choice([0.0, 0.5, 1.0])),
                    "reward_components": rng.choice([0.0, 1.0], size=(steps, 2)).tolist(),
                }
            )
    return records


def flat(advantages: list[list[float]]) -> np.ndarray:
    return np.array([value for episode in advantages for value in episode])


def cases(seed: int) -> list[list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    return [random_records(rng) for _ in range(CASES)]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "steps"])
def test_step_weight_zero_makes_gigpo_grpo(mode: str, episode_stats: str) -> None:
    for records in cases(1):
        gigpo = estimate_records("gigpo", records, step_weight=0.0, mode=mode, episode_stats=episode_stats)
        grpo = estimate_records("grpo", records, mode=mode, episode_stats=episode_stats)
        assert gigpo == grpo


def test_gamma_one_with_terminal_rewards_makes_every_step_return_the_episode_return() -> None:
    rng = np.random.default_rng(2)
    for _ in range(CASES):
        batch = records_to_batch(random_records(rng, terminal_only=True))
        returns = discounted_returns(batch, batch.rewards, 1.0)
        assert returns == pytest.approx(episode_returns(batch, batch.rewards)[batch.episode])


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_permuting_episodes_permutes_the_output(name: str) -> None:
    rng = np.random.default_rng(3)
    for records in cases(3):
        order = rng.permutation(len(records))
        original = estimate_records(name, records, **OPTIONS[name])
        permuted = estimate_records(name, [records[i] for i in order], **OPTIONS[name])
        for position, index in enumerate(order):
            assert permuted[position] == pytest.approx(original[index], abs=1e-9)


@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - {"gdpo"}))
def test_groups_do_not_influence_each_other(name: str) -> None:
    # GDPO is excluded on purpose: its final whitening is batch-wide by definition
    for records in cases(4):
        together = estimate_records(name, records, **OPTIONS[name])
        for group in {record["group"] for record in records}:
            rows = [i for i, record in enumerate(records) if record["group"] == group]
            alone = estimate_records(name, [records[i] for i in rows], **OPTIONS[name])
            for row, values in zip(rows, alone, strict=True):
                assert together[row] == pytest.approx(values, abs=1e-9)


@pytest.mark.parametrize("base", ["grpo", "drgrpo", "rloo"])
def test_salt_without_shared_transitions_is_its_base(base: str) -> None:
    for records in cases(5):
        for i, record in enumerate(records):
            record["actions"] = [f"{i}:{t}" for t in range(len(record["rewards"]))]
        assert estimate_records("salt", records, base=base) == estimate_records(base, records)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_outputs_are_finite_and_shaped_like_the_input(name: str) -> None:
    for records in cases(6):
        advantages = estimate_records(name, records, **OPTIONS[name])
        assert [len(a) for a in advantages] == [len(r["rewards"]) for r in records]
        assert np.isfinite(flat(advantages)).all()


# ---- reference implementations: straight from CREDIT.md, dicts and loops --------------------------------


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
def test_gigpo_matches_the_reference(mode: str) -> None:
    for records in cases(7):
        got = estimate_records("gigpo", records, gamma=0.9, step_weight=0.7, mode=mode)
        assert flat(got) == pytest.approx(flat(reference_gigpo(records, 0.9, 0.7, mode)), abs=1e-9)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("history", [0, 1, 3])
def test_hgpo_matches_the_reference(mode: str, history: int) -> None:
    for records in cases(8):
        got = estimate_records("hgpo", records, gamma=0.9, history=history, mode=mode)
        assert flat(got) == pytest.approx(flat(reference_hgpo(records, 0.9, history, mode)), abs=1e-9)


def test_salt_matches_the_reference() -> None:
    for records in cases(9):
        assert flat(estimate_records("salt", records)) == pytest.approx(
            flat(reference_salt(records)), abs=1e-9
        )


def test_discounted_returns_flat_path_for_very_uneven_lengths() -> None:
    # one long episode among many one-step ones: the padded table would be huge, so the flat scan runs
    rng = np.random.default_rng(10)
    records = [{"group": 0, "states": ["a"] * 3001, "rewards": rng.random(3000).tolist()}]
    records += [{"group": 1, "states": ["a", "b"], "rewards": [float(r)]} for r in rng.random(2000)]
    batch = records_to_batch(records)
    expected = [value for r in records for value in step_returns(r["rewards"], 0.9)]
    assert discounted_returns(batch, batch.rewards, 0.9) == pytest.approx(expected, rel=1e-12)
