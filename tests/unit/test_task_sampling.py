"""Task samplers (agentrl/trainer/task_sampling.py): the pure parts, whole steps with scripted episodes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from agentrl.config import load_config
from agentrl.credit import episodes_to_batch
from agentrl.credit.metrics import zero_variance_group_fraction
from agentrl.errors import ConfigError
from agentrl.tasks import AdaptiveConfig, FilterConfig, Task, sample_tasks
from agentrl.trainer.task_sampling import (
    StepEpisodes,
    TaskSampler,
    adaptive_draws,
    collect,
    counts_from_draws,
    expected_signal,
    extra_round_size,
    filtered_reasons,
    is_informative,
    posterior,
)
from agentrl.types import Action, Episode, Turn

TASKS: list[Task] = [{"id": f"t{i:02d}"} for i in range(20)]


def episode(task_id: str, group: str, rewards: Sequence[float], invalid: Sequence[bool] = ()) -> Episode:
    turns = tuple(
        Turn(
            index=t,
            prompt_ids=(1,),
            completion_ids=(2,),
            completion_logprobs=(-0.1,),
            text="",
            action=Action(""),
            observation="",
            reward=reward,
            invalid=bool(invalid[t]) if t < len(invalid) else False,
            state_key=None,
        )
        for t, reward in enumerate(rewards)
    )
    success = sum(rewards) >= 1.0
    return Episode(
        f"{group}-{len(rewards)}", "test/Env-v0", task_id, group, 0, turns, "terminated", None, success
    )


def infra_failure(task_id: str, group: str) -> Episode:
    return Episode(f"{group}-x", "test/Env-v0", task_id, group, 0, (), "infra_error", error="boom")


def scripted_play(
    informative_ids: set[str], group_size: int = 2
) -> tuple[list[tuple[list[str], int]], object]:
    """A `Play` whose groups are informative (one success, the rest failures) exactly for `informative_ids`;
    every other group fails all its episodes. Also returns the log of (task ids, seed) per call."""
    calls: list[tuple[list[str], int]] = []

    async def play(tasks: Sequence[Task], seed: int) -> list[Episode]:
        ids = [str(task["id"]) for task in tasks]
        calls.append((ids, seed))
        return [
            episode(task_id, f"{task_id}-{seed}", [1.0 if task_id in informative_ids and m == 0 else 0.0])
            for task_id in ids
            for m in range(group_size)
        ]

    return calls, play


def sampler(kind: str, **options: object) -> TaskSampler:
    return TaskSampler(kind=kind, tasks=TASKS, tasks_per_step=4, group_size=2, seed=7, **options)  # type: ignore[arg-type]


def run(kind_sampler: TaskSampler, play: object, step: int = 1) -> StepEpisodes:
    return asyncio.run(collect(kind_sampler, step, play))  # type: ignore[arg-type]


# ---- informativeness -------------------------------------------------------------------------------------


def test_informative_agrees_with_the_zero_variance_metric() -> None:
    groups = [
        [episode("a", "g0", [0.0, 1.0]), episode("a", "g0", [1.0])],  # equal returns: 1 and 1
        [episode("b", "g1", [0.5]), episode("b", "g1", [0.5], invalid=[True])],  # the penalty separates them
        [episode("c", "g2", [1.0]), episode("c", "g2", [0.0])],
        [episode("d", "g3", [0.2, 0.1]), episode("d", "g3", [0.1, 0.2])],
    ]
    flags = [is_informative(group, 0.1) for group in groups]
    assert flags == [False, True, True, False]
    batch = episodes_to_batch([e for group in groups for e in group])
    assert zero_variance_group_fraction(batch, 0.1) == pytest.approx(flags.count(False) / len(flags))


def test_infrastructure_failures_do_not_count_towards_variance() -> None:
    assert not is_informative([episode("a", "g", [1.0]), infra_failure("a", "g")], 0.1)
    assert not is_informative([infra_failure("a", "g"), infra_failure("a", "g")], 0.1)


# ---- filtered ----------------------------------------------------------------------------------------------


def test_filtered_reasons_keep_the_first_informative_groups_and_fill_from_the_earliest_dropped() -> None:
    assert filtered_reasons([True, False, True, True, True], 3) == [
        "informative",
        "filtered_out",
        "informative",
        "informative",
        "surplus",
    ]
    assert filtered_reasons([False, True, False, False], 3) == [
        "filler",
        "informative",
        "filler",
        "filtered_out",
    ]


def test_extra_round_size_follows_the_informative_rate_and_the_budget() -> None:
    assert extra_round_size(need=2, informative=2, played=4, budget_left=8, unplayed=100) == 4
    assert extra_round_size(need=4, informative=0, played=4, budget_left=8, unplayed=100) == 8  # capped
    assert extra_round_size(need=1, informative=1, played=4, budget_left=0, unplayed=100) == 0
    assert extra_round_size(need=0, informative=4, played=4, budget_left=8, unplayed=100) == 0
    assert extra_round_size(need=3, informative=1, played=4, budget_left=8, unplayed=2) == 2


def test_uniform_draws_exactly_sample_tasks_and_trains_on_everything() -> None:
    calls, play = scripted_play({"t03"})
    got = run(sampler("uniform"), play, step=3)
    expected = [str(task["id"]) for task in sample_tasks(TASKS, 4, 7, 3)]
    assert calls == [(expected, 3)]
    assert [str(task["id"]) for task in got.tasks] == expected
    assert got.episodes == got.played_episodes and got.dropped == []
    assert {draw["reason"] for draw in got.draws} == {"uniform"}
    assert "extra_groups_played" not in got.metrics


def test_filtered_plays_extra_rounds_until_enough_informative_groups() -> None:
    informative = {f"t{i:02d}" for i in range(0, 20, 2)}  # half the tasks teach
    calls, play = scripted_play(informative)
    got = run(sampler("filtered"), play, step=2)
    first = [str(task["id"]) for task in sample_tasks(TASKS, 4, 7, 2)]
    assert calls[0] == (first, 2)  # round 0 is uniform's draw with uniform's rollout seed
    assert len({seed for _, seed in calls}) == len(calls)  # every round has its own rollout seed
    played = [task_id for ids, _ in calls for task_id in ids]
    assert len(played) == len(set(played))  # no task twice in a step
    assert [str(task["id"]) for task in got.tasks] == [t for t in played if t in informative][:4]
    assert len(got.episodes) == 4 * 2
    assert len(got.played_episodes) == len(played) * 2
    assert {e.task_id for e in got.dropped}.isdisjoint({str(task["id"]) for task in got.tasks})
    assert got.metrics["extra_groups_played"] == len(played) - 4
    assert got.metrics["zero_variance_groups"] == pytest.approx(
        sum(t not in informative for t in played) / len(played)
    )
    assert got.metrics["informative_episodes"] == 8
    assert [draw["round"] for draw in got.draws] == [r for r, (ids, _) in enumerate(calls) for _ in ids]


def test_filtered_respects_the_budget_and_fills_the_step() -> None:
    calls, play = scripted_play({"t19"} - {"t19"})  # nothing teaches
    got = run(sampler("filtered", filter=FilterConfig(budget=1.5)), play)
    played = [task_id for ids, _ in calls for task_id in ids]
    assert len(played) == 4 + 6  # floor(1.5 x 4) extra groups, no more
    assert got.metrics["extra_groups_played"] == 6 and got.metrics["filler_groups"] == 4
    assert [str(task["id"]) for task in got.tasks] == played[:4]  # the earliest dropped groups fill the step
    reasons = [draw["reason"] for draw in got.draws]
    assert reasons == ["filler"] * 4 + ["filtered_out"] * 6


def test_filtered_with_no_budget_trains_on_uniforms_groups() -> None:
    calls, play = scripted_play(set())
    got = run(sampler("filtered", filter=FilterConfig(budget=0.0)), play, step=5)
    assert len(calls) == 1
    assert [str(t["id"]) for t in got.tasks] == [str(t["id"]) for t in sample_tasks(TASKS, 4, 7, 5)]


# ---- adaptive ----------------------------------------------------------------------------------------------


def test_posterior_counts_add_up_and_rebuild_from_draw_rows() -> None:
    calls, play = scripted_play({"t01", "t02"})
    live = sampler("adaptive", adaptive=AdaptiveConfig(exploration=0.0))
    draws: list[dict[str, object]] = []
    for step in (1, 2, 3):
        draws += run(live, play, step=step).draws
    for task_id, (successes, failures) in live.counts.items():
        plays = sum(task_id in ids for ids, _ in calls)
        wins = plays if task_id in {"t01", "t02"} else 0
        assert (successes, failures) == (wins, plays * 2 - wins)
    assert counts_from_draws(draws) == live.counts
    task_id, (successes, failures) = next(iter(live.counts.items()))
    assert posterior(live.counts, task_id, (2.0, 3.0)) == (2.0 + successes, 3.0 + failures)


def test_adaptive_draws_are_deterministic_and_prefer_tasks_near_one_half() -> None:
    counts = {"t00": (5, 5), "t01": (0, 10), "t02": (10, 0), "t03": (1, 9)}
    options = AdaptiveConfig(exploration=0.0)

    def pick(seed: int, count: int = 1) -> list[str]:
        rng = np.random.default_rng((seed, 1, 2))
        return [str(d.task["id"]) for d in adaptive_draws(TASKS, counts, options, count, rng)]

    assert pick(3, 4) == pick(3, 4)
    firsts = [pick(seed)[0] for seed in range(200)]
    assert firsts.count("t00") > 150  # p ~ 0.5 beats unseen tasks (prior 1/6) and the solved / hopeless ones
    # a solved or hopeless task wins only when its Thompson draw lands near 1/2, which is rare
    assert firsts.count("t01") + firsts.count("t02") < 10
    # the other slots go mostly to unseen tasks: the prior's expected signal beats a hopeless task's draw
    later = [task_id for seed in range(50) for task_id in pick(seed, 4)[1:]]
    assert sum(task_id in {"t01", "t02"} for task_id in later) < 10


def test_adaptive_exploration_slots_and_the_first_step_of_a_fresh_run() -> None:
    rng = np.random.default_rng(0)
    draws = adaptive_draws(TASKS, {}, AdaptiveConfig(exploration=0.5), 4, rng)
    assert [d.reason for d in draws] == ["posterior", "posterior", "explore", "explore"]
    assert len({str(d.task["id"]) for d in draws}) == 4
    assert all(d.score == pytest.approx(expected_signal(1.0, 1.0)) for d in draws)  # nothing seen: the prior


def test_adaptive_step_metrics() -> None:
    _, play = scripted_play({"t00"})
    live = sampler("adaptive")
    got = run(live, play)
    assert got.metrics["posterior_mean_signal"] == pytest.approx(1 / 6)
    assert got.metrics["seen_tasks"] == 4 and got.metrics["played_groups"] == 4
    assert all(draw["alpha"] == 1.0 and draw["beta"] == 1.0 for draw in got.draws)


# ---- config ------------------------------------------------------------------------------------------------


def test_sampler_config_is_validated() -> None:
    assert load_config("calc").tasks.sampler == "uniform"
    config = load_config("calc", ["tasks.sampler=adaptive", "tasks.adaptive.prior=[2, 3]"])
    assert config.tasks.adaptive.prior == (2, 3)
    with pytest.raises(ConfigError, match="tasks.sampler must be one of uniform, filtered, adaptive"):
        load_config("calc", ["tasks.sampler=greedy"])
    with pytest.raises(ConfigError, match="tasks.filter.budget must be >= 0"):
        load_config("calc", ["tasks.sampler=filtered", "tasks.filter.budget=-1"])
    with pytest.raises(ConfigError, match="tasks.adaptive.prior must be two positive numbers"):
        load_config("calc", ["tasks.adaptive.prior=[1]"])


def test_async_mode_refuses_other_samplers() -> None:
    with pytest.raises(ConfigError, match="tasks.sampler=filtered runs only in sync mode"):
        load_config("calc", ["trainer.async_mode=true", "tasks.sampler=filtered"])
    assert load_config("calc", ["trainer.async_mode=true"]).tasks.sampler == "uniform"
