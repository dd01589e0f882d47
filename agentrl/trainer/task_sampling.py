"""Task samplers (`tasks.sampler`): which tasks a training step plays, and which played groups it trains on.

A group whose episode returns are all equal (after the invalid-turn penalty, as
`agentrl.credit.metrics.zero_variance_group_fraction` counts them) carries no group-relative signal. The
samplers differ in how hard they work to avoid such groups:

    uniform   `agentrl.tasks.sample_tasks`: `train.tasks_per_step` distinct tasks, a pure function of
              (train.seed, step); every played group is trained on. What the loop did before samplers.
    filtered  DAPO's dynamic sampling. Round 0 is the uniform draw. Zero-variance groups are dropped
              ("filtered_out") and extra groups, of tasks not yet played this step and drawn uniformly, are
              played in rounds until tasks_per_step informative groups are kept ("informative") or
              floor(tasks.filter.budget x tasks_per_step) extra groups have been played. Each extra round
              plays as many groups as the step's informative rate so far says are needed (capped by the
              budget). Informative groups beyond tasks_per_step are dropped ("surplus"). When the budget runs
              out first, the step is filled with the earliest dropped groups ("filler"): a step always trains
              on tasks_per_step groups, budget 0 trains on exactly uniform's groups, and step-level
              estimators (GiGPO, HGPO, SALT) keep the anchor signal an all-equal group may still hold.
    adaptive  a Beta(alpha, beta) posterior of each task's success rate, starting at `tasks.adaptive.prior`
              and updated with the successes and failures of every group played. A task's worth is its
              expected signal p(1-p): a task already played is scored by p(1-p) with p drawn from its
              posterior (Thompson sampling), a task never played by the prior's expectation of p(1-p) (1/6
              for Beta(1, 1)); the best-scored tasks are drawn ("posterior"), ties broken at random. Scoring
              unseen tasks by a random draw instead would make the best of hundreds of unseen tasks score
              ~0.25 and the sampler would never revisit a task until the split ran out. The
              floor(tasks.adaptive.exploration x tasks_per_step) remaining slots go to tasks drawn uniformly
              from those not picked ("explore"), so the draw never narrows to a few tasks. Every random
              choice comes from (train.seed, step): the draw is deterministic given the posterior.

Every played group becomes one `task_draws` row (its task, round, reason, successes and failures, and for
the adaptive sampler the posterior at the draw and the score), so a run shows which tasks it trained on and
why. Dropped groups ("filtered_out", "surplus") are stored with no advantages, like infrastructure failures,
and never reach credit assignment. On `trainer.resume` the posterior is rebuilt from the run's `task_draws`
rows (the store drops those after the checkpoint's step): integer counts, so exactly what it was.

Metrics per step: zero_variance_groups (fraction of the played groups, before filtering),
informative_episodes (episodes of the trained groups whose returns differ), played_groups; filtered adds
extra_groups_played, filler_groups, surplus_groups, sampler_rounds; adaptive adds posterior_mean_signal (the
mean over the drawn tasks of E[p(1-p)] under their posterior) and seen_tasks.

What this is not: replay of past groups, a curriculum across env levels, or used by the async loop (which
draws uniformly; `RunConfig` refuses other samplers with `trainer.async_mode`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentrl.config import RunConfig
from agentrl.credit import episodes_to_batch
from agentrl.credit.metrics import DEFAULT_INVALID_PENALTY, zero_variance_group_fraction
from agentrl.store.repository import load_task_draws
from agentrl.tasks import AdaptiveConfig, FilterConfig, Task, sample_tasks
from agentrl.trainer.run import RunContext, play_tasks
from agentrl.types import Episode

REASONS = ("uniform", "informative", "surplus", "filtered_out", "filler", "posterior", "explore")
DROPPED_REASONS = frozenset({"surplus", "filtered_out"})
ROUND_SEED_STRIDE = 1_000_000  # rollout seed of round r of step s: s + r x stride, distinct from other steps'
FILTER_STREAM, ADAPTIVE_STREAM = 1, 2  # numpy seed parts: no draw reuses sample_tasks's (seed, step) stream

Counts = dict[str, tuple[int, int]]
"""Task id -> (successes, failures) over every group played so far (infrastructure failures not counted)."""

Play = Callable[[Sequence[Task], int], Awaitable[list[Episode]]]
"""(tasks, rollout seed) -> `group_size` episodes per task, in task order then member order."""


@dataclass
class TaskSampler:
    """One run's sampler: its kind and options, the split it draws from, and the success counts so far."""

    kind: str
    tasks: list[Task]
    tasks_per_step: int
    group_size: int
    seed: int
    filter: FilterConfig = field(default_factory=FilterConfig)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    invalid_penalty: float = DEFAULT_INVALID_PENALTY
    counts: Counts = field(default_factory=dict)


@dataclass(frozen=True)
class Draw:
    """A task chosen for a round and why; `alpha`, `beta` and `score` only from the adaptive sampler."""

    task: Task
    reason: str
    alpha: float | None = None
    beta: float | None = None
    score: float | None = None


@dataclass(frozen=True)
class Group:
    """A played group: its draw, round, episodes, and whether its returns differ."""

    draw: Draw
    round: int
    episodes: tuple[Episode, ...]
    informative: bool


@dataclass(frozen=True)
class StepEpisodes:
    """What a step played: the kept tasks and their episodes (what credit assignment and the update see),
    every played episode, the sampler's metrics, and one task-draw record per played group."""

    tasks: list[Task]
    episodes: list[Episode]
    played_episodes: list[Episode]
    metrics: dict[str, float]
    draws: list[dict[str, Any]]

    @property
    def dropped(self) -> list[Episode]:
        """The played episodes that are not trained on (stored with no advantages)."""
        kept = {id(episode) for episode in self.episodes}
        return [episode for episode in self.played_episodes if id(episode) not in kept]


# ---- the entry points of the sync loop ----------------------------------------------------------------


def sampler_for_run(
    config: RunConfig, tasks: list[Task], draws: Iterable[Mapping[str, Any]] = ()
) -> TaskSampler:
    """The run's sampler; `draws` (a resumed run's `task_draws` rows) rebuild its success counts."""
    settings = config.credit.settings
    return TaskSampler(
        kind=config.tasks.sampler,
        tasks=tasks,
        tasks_per_step=config.train.tasks_per_step,
        group_size=config.train.group_size,
        seed=config.train.seed,
        filter=config.tasks.filter,
        adaptive=config.tasks.adaptive,
        invalid_penalty=float(getattr(settings, "invalid_penalty", DEFAULT_INVALID_PENALTY)),
        counts=counts_from_draws(draws),
    )


def resumed_sampler(ctx: RunContext, tasks: list[Task], resumed: bool) -> TaskSampler:
    """The run's sampler, its counts rebuilt from the store when the run was resumed."""
    draws = load_task_draws(ctx.store, ctx.run_id) if resumed else []
    return sampler_for_run(ctx.config, tasks, draws)


async def collect_step(ctx: RunContext, sampler: TaskSampler, step: int) -> StepEpisodes:
    """Play step `step`'s groups through the run's engine as `sampler` decides; update its counts."""
    config = ctx.config
    torch.manual_seed(config.train.seed * 1_000_003 + step)

    async def play(tasks: Sequence[Task], seed: int) -> list[Episode]:
        return await play_tasks(ctx, tasks, config.train.group_size, config.sampling, seed=seed)

    return await collect(sampler, step, play)


def record_sampling(ctx: RunContext, step: int, collected: StepEpisodes) -> None:
    """The dropped episodes (no advantages: never trained on) and the step's task draws into the store."""
    ctx.writer.record_episodes(ctx.run_id, step, "train", collected.dropped, None)
    ctx.writer.record_task_draws(ctx.run_id, collected.draws)


# ---- one step -----------------------------------------------------------------------------------------


async def collect(sampler: TaskSampler, step: int, play: Play) -> StepEpisodes:
    """Draw, play (in rounds for `filtered`), select and account for one step; updates `sampler.counts`."""
    first = first_draws(sampler, step)
    groups = await play_round(sampler, play, first, step, 0)
    if sampler.kind == "filtered":
        groups = await play_extra_rounds(sampler, play, groups, step)
    reasons = (
        filtered_reasons([group.informative for group in groups], sampler.tasks_per_step)
        if sampler.kind == "filtered"
        else [group.draw.reason for group in groups]
    )
    kept = [group for group, reason in zip(groups, reasons, strict=True) if reason not in DROPPED_REASONS]
    sampler.counts = updated_counts(sampler.counts, groups)
    metrics = sampler_metrics(sampler, groups, reasons, kept)
    return StepEpisodes(
        tasks=[group.draw.task for group in kept],
        episodes=[episode for group in kept for episode in group.episodes],
        played_episodes=[episode for group in groups for episode in group.episodes],
        metrics=metrics,
        draws=[draw_record(step, group, reason) for group, reason in zip(groups, reasons, strict=True)],
    )


def first_draws(sampler: TaskSampler, step: int) -> list[Draw]:
    """Round 0: uniform's draw (uniform, filtered) or the posterior's (adaptive)."""
    if sampler.kind == "adaptive":
        rng = np.random.default_rng((sampler.seed, step, ADAPTIVE_STREAM))
        return adaptive_draws(sampler.tasks, sampler.counts, sampler.adaptive, sampler.tasks_per_step, rng)
    tasks = sample_tasks(sampler.tasks, sampler.tasks_per_step, sampler.seed, step)
    return [Draw(task, "uniform") for task in tasks]


async def play_round(
    sampler: TaskSampler, play: Play, draws: Sequence[Draw], step: int, round_: int
) -> list[Group]:
    """Play one round's draws (rollout seed `step` for round 0, distinct seeds for later rounds)."""
    episodes = await play([draw.task for draw in draws], step + round_ * ROUND_SEED_STRIDE)
    size = sampler.group_size
    return [
        Group(draw, round_, members, is_informative(members, sampler.invalid_penalty))
        for draw, members in zip(
            draws, (tuple(episodes[i * size : (i + 1) * size]) for i in range(len(draws))), strict=True
        )
    ]


async def play_extra_rounds(sampler: TaskSampler, play: Play, groups: list[Group], step: int) -> list[Group]:
    """The filtered sampler's extra rounds, until enough informative groups or the budget is spent."""
    budget = math.floor(sampler.filter.budget * sampler.tasks_per_step)
    round_ = 0
    while True:
        played_ids = {str(group.draw.task["id"]) for group in groups}
        unplayed = [task for task in sampler.tasks if str(task["id"]) not in played_ids]
        size = extra_round_size(
            need=sampler.tasks_per_step - sum(group.informative for group in groups),
            informative=sum(group.informative for group in groups),
            played=len(groups),
            budget_left=budget - (len(groups) - sampler.tasks_per_step),
            unplayed=len(unplayed),
        )
        if size <= 0:
            return groups
        round_ += 1
        rng = np.random.default_rng((sampler.seed, step, FILTER_STREAM, round_))
        draws = [Draw(unplayed[i], "uniform") for i in rng.choice(len(unplayed), size=size, replace=False)]
        groups = groups + await play_round(sampler, play, draws, step, round_)


# ---- pure parts ---------------------------------------------------------------------------------------


def is_informative(episodes: Sequence[Episode], invalid_penalty: float) -> bool:
    """Whether a group's usable episodes (not infrastructure failures) have returns that differ, counted
    exactly as the credit metric `zero_variance_group_fraction` counts them: GRPO gives a group of equal
    returns, or of fewer than two usable episodes, no signal."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    if len(usable) < 2:
        return False
    return zero_variance_group_fraction(episodes_to_batch(usable), invalid_penalty) == 0.0


def extra_round_size(need: int, informative: int, played: int, budget_left: int, unplayed: int) -> int:
    """Groups the filtered sampler plays next: enough to expect `need` more informative groups at this
    step's informative rate so far (counting at least one, so a step that found none asks for a finite
    number), capped by the extra-group budget left and the tasks not played yet; 0 to stop."""
    if need <= 0 or played <= 0:
        return 0
    rate = max(informative, 1) / played
    return max(0, min(budget_left, unplayed, math.ceil(need / rate)))


def filtered_reasons(informative: Sequence[bool], tasks_per_step: int) -> list[str]:
    """Why each played group (in play order) is kept or dropped: the first `tasks_per_step` informative
    groups are "informative", later ones "surplus"; zero-variance groups are "filtered_out", except that
    the earliest of them fill the step ("filler") when fewer than `tasks_per_step` are informative."""
    reasons: list[str] = []
    kept = 0
    for good in informative:
        if not good:
            reasons.append("filtered_out")
            continue
        reasons.append("informative" if kept < tasks_per_step else "surplus")
        kept += 1
    missing = tasks_per_step - min(kept, tasks_per_step)
    for index, reason in enumerate(reasons):
        if missing and reason == "filtered_out":
            reasons[index], missing = "filler", missing - 1
    return reasons


def group_outcome(episodes: Sequence[Episode]) -> tuple[int, int]:
    """(successes, failures) of a group's usable episodes."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    successes = sum(episode.success for episode in usable)
    return successes, len(usable) - successes


def updated_counts(counts: Mapping[str, tuple[int, int]], groups: Iterable[Group]) -> Counts:
    """`counts` plus the successes and failures of every played group (dropped ones too: they were seen)."""
    return add_outcomes(counts, ((str(g.draw.task["id"]), *group_outcome(g.episodes)) for g in groups))


def counts_from_draws(draws: Iterable[Mapping[str, Any]]) -> Counts:
    """The success counts that stored task-draw rows add up to (a resumed run's posterior)."""
    return add_outcomes({}, ((str(d["task_id"]), int(d["successes"]), int(d["failures"])) for d in draws))


def add_outcomes(counts: Mapping[str, tuple[int, int]], outcomes: Iterable[tuple[str, int, int]]) -> Counts:
    new = dict(counts)
    for task_id, successes, failures in outcomes:
        old_successes, old_failures = new.get(task_id, (0, 0))
        new[task_id] = (old_successes + successes, old_failures + failures)
    return new


def posterior(
    counts: Mapping[str, tuple[int, int]], task_id: str, prior: tuple[float, float]
) -> tuple[float, float]:
    """(alpha, beta) of a task's Beta posterior of success."""
    successes, failures = counts.get(task_id, (0, 0))
    return prior[0] + successes, prior[1] + failures


def expected_signal(alpha: float | np.ndarray, beta: float | np.ndarray) -> Any:
    """E[p(1-p)] for p ~ Beta(alpha, beta): alpha beta / ((alpha + beta)(alpha + beta + 1))."""
    total = alpha + beta
    return alpha * beta / (total * (total + 1.0))


def adaptive_draws(
    tasks: Sequence[Task],
    counts: Mapping[str, tuple[int, int]],
    options: AdaptiveConfig,
    count: int,
    rng: np.random.Generator,
) -> list[Draw]:
    """`count` distinct tasks: the best by expected signal (Thompson draws of p(1-p) for tasks played
    before, the prior's E[p(1-p)] for the others), ties broken at random, then the exploration slots drawn
    uniformly from the rest. See the module docstring."""
    ids = [str(task["id"]) for task in tasks]
    if count > len(ids):
        raise ValueError(f"asked for {count} tasks per step but the split has only {len(ids)}")
    prior = (float(options.prior[0]), float(options.prior[1]))
    pairs = [posterior(counts, task_id, prior) for task_id in ids]
    alpha, beta = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    seen = np.array([task_id in counts for task_id in ids])
    sampled = rng.beta(alpha, beta)  # drawn for every task, so the stream does not depend on which were seen
    score = np.where(seen, sampled * (1.0 - sampled), expected_signal(*prior))
    tie_break = rng.permutation(len(ids))
    order = np.lexsort((tie_break, -score))
    explore = math.floor(options.exploration * count)
    chosen = list(order[: count - explore])
    rest = order[count - explore :]
    explored = list(rng.choice(rest, size=explore, replace=False)) if explore else []
    return [
        Draw(tasks[i], reason, float(alpha[i]), float(beta[i]), float(score[i]))
        for reason, picked in (("posterior", chosen), ("explore", explored))
        for i in picked
    ]


def sampler_metrics(
    sampler: TaskSampler, groups: Sequence[Group], reasons: Sequence[str], kept: Sequence[Group]
) -> dict[str, float]:
    """The step's sampler metrics (see the module docstring)."""
    metrics = {
        "zero_variance_groups": float(np.mean([not g.informative for g in groups])) if groups else 0.0,
        "informative_episodes": float(
            sum(len([e for e in g.episodes if not e.is_infra_failure]) for g in kept if g.informative)
        ),
        "played_groups": float(len(groups)),
    }
    if sampler.kind == "filtered":
        metrics["extra_groups_played"] = float(sum(g.round > 0 for g in groups))
        metrics["filler_groups"] = float(reasons.count("filler"))
        metrics["surplus_groups"] = float(reasons.count("surplus"))
        metrics["sampler_rounds"] = float(max(g.round for g in groups) + 1 if groups else 0)
    if sampler.kind == "adaptive":
        posteriors = [(g.draw.alpha, g.draw.beta) for g in groups]
        signals = [expected_signal(a, b) for a, b in posteriors if a is not None and b is not None]
        metrics["posterior_mean_signal"] = float(np.mean(signals)) if signals else 0.0
        metrics["seen_tasks"] = float(len(sampler.counts))
    return metrics


def draw_record(step: int, group: Group, reason: str) -> dict[str, Any]:
    """One `task_draws` row (`agentrl.store.repository.TASK_DRAW_FIELDS`)."""
    successes, failures = group_outcome(group.episodes)
    played = successes + failures
    return {
        "step": step,
        "round": group.round,
        "task_id": str(group.draw.task["id"]),
        "group_id": group.episodes[0].group_id if group.episodes else "",
        "reason": reason,
        "successes": successes,
        "failures": failures,
        "success_rate": successes / played if played else None,
        "alpha": group.draw.alpha,
        "beta": group.draw.beta,
        "score": group.draw.score,
    }
