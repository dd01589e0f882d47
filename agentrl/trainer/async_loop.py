"""The async training loop (`trainer.async_mode=true`): rollouts of step n+1 overlap the update of step n.

What this is: `AsyncSeat`, rank 0's seat in the one training loop (`agentrl/trainer/loop.py`), which every
run shares with the sync seats, plus the few parts it needs; the step body (credit, update, records) is
the one every seat shares (`agentrl/trainer/step.py`). Each step:
    1. APRIL partial rollouts: keep ceil(tasks_per_step x overprovision) groups (G episodes of one task) in
       flight as asyncio tasks; train on the first `tasks_per_step` groups that finish; the others carry
       over, still running, and compete for the next step (`carried_over_groups`).
    2. Staleness bound: a group whose oldest turn was sampled more than `trainer.max_staleness` updates
       before the weights it would train is dropped, never trained on (`dropped_stale_groups`; running
       groups that can no longer be fresh are cancelled early and counted there too).
    3. The update runs in a worker thread while the groups launched for the next step keep generating (they
       are asyncio tasks, topped up before the update starts); when it ends, the new weights are loaded
       into the engine, and only then does the next step take its groups.

Weights: the update trains its own copy of the policy (`Learner.policy`, a deep copy of the engine's
module: one more copy of the weights in memory, `policy_copy_mb`, logged at step 0) so
that generation never reads half-updated parameters. Why not one shared module with only
`optimizer.step()` locked against generation: the HF engine reads the module itself, the cached engine's
compute copy aliases the fp32 parameters it does not fuse, and the update switches the module to train
mode; a lock would have to reach inside every engine and the update, and a turn could still straddle two
versions. The copy costs one `load_state_dict` per update (`sync_s`, logged every step).
`WeightsGate` puts every `generate` call behind a readers-writer gate: a weight load waits for the calls in
flight (`sync_wait_s`), holds new ones, copies the weights (`sync_s`) and bumps the version. So every turn
is sampled by exactly one weights version, recorded per turn; an episode spanning a load is mixed-version.
Each turn's version is kept in its `info["weights_version"]` (so the store has it). Staleness of a
trained turn = the policy version being trained minus the version that sampled it (`staleness_mean`,
`staleness_max`).

The loss on stale samples: PPO's "old" log-probs are the sampler's own (the behaviour policy that really
produced the tokens), so the ratio pi_theta / pi_sampler starts away from 1 for stale turns and PPO's clip
(and dual clip) bound how far one update moves on them; tokens whose ratio is already outside the clip
range in the advantage's direction give no gradient. With `loss.tis_cap` > 0 (`update.with_tis_weights`) the
ratio is taken against the trainer's log-probs under the current (pre-update) weights instead, and each
token's advantage is weighted by min(pi_current / pi_sampler, tis_cap): decoupled PPO with a truncated
importance weight for the policy lag. `ess`, the normalised effective sample size of pi_trainer /
pi_sampler over the first mini batch's tokens, is logged every step (in sync mode too).

Env steps (`env_steps`, `env_steps_total`, what `train.env_step_budget` counts) are those of the groups
trained on: the groups dropped as stale, cancelled, or still in flight when the run ends played env steps
that are not counted, so the env played at least the logged total.

What this is not: multi-process (trainer.nproc must be 1), resumable (refused in `TrainerConfig`), or
deterministic (which groups finish first depends on timing). Estimators that need something measured with
the policy before they run (IGPO's answer probabilities) are refused when the config is built: the weights
would be changing under the measurement.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from agentrl.agent.engines.base import Completion, PolicyEngine, SamplingParams
from agentrl.agent.rollout import episode_seed, play_member, run_concurrently
from agentrl.config import RunConfig
from agentrl.tasks import Task, load_tasks, sample_tasks
from agentrl.trainer.loop import Collected, LoopResult, Plan, RunOwner, run_loop
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.run import (
    RunContext,
    log_metrics,
    open_run,
    pad_id,
    require_some_usable,
    rollout_metrics,
)
from agentrl.trainer.step import (
    Credited,
    Learner,
    WeightsOut,
    assign_credit,
    make_learner,
    publish_weights,
    record_step,
)
from agentrl.trainer.update import UpdateResult
from agentrl.types import Episode


async def async_rank_zero(config: RunConfig, parallel: DataParallel) -> LoopResult:
    """The only process: open the run and take the async producer's seat in the one loop."""
    async with open_run(config, kind="train") as ctx:
        seat = AsyncSeat(ctx, parallel)
        try:
            return await run_loop(config, seat, None)
        finally:
            await seat.pool.aclose()


@dataclass
class AsyncSeat(RunOwner):
    """The async producer's seat in `loop.run_loop` (module docstring): groups play in the background;
    `collect` takes the first fresh ones, and the update of a step overlaps the next step's rollouts."""

    gate: WeightsGate = field(init=False)
    pool: GroupPool = field(init=False)
    weights_out: WeightsOut = field(init=False)
    policy_version: int = 0  # updates landed so far: the version the next update trains from
    logged: dict[str, float] = field(default_factory=dict)
    clocks: tuple[float, float] = (0.0, 0.0)  # wall and process CPU seconds when the loop started

    def __post_init__(self) -> None:
        config = self.ctx.config
        self.gate = WeightsGate(self.ctx.engine)
        self.pool = GroupPool(capacity=math.ceil(config.train.tasks_per_step * config.trainer.overprovision))
        self.weights_out = ThroughGate(self.gate)
        self.train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        self.launches = itertools.count()

    def make_learner(self) -> Learner:
        engine = self.ctx.engine
        learner = make_learner(
            self.ctx.config, self.parallel, copy.deepcopy(engine.module), pad_id(engine.tokenizer)
        )
        log_metrics(self.ctx, 0, {"policy_copy_mb": parameter_bytes(learner.policy) / 2**20})
        torch.manual_seed(self.ctx.config.train.seed)
        return learner

    def restored(self, learner: Learner) -> None:
        raise AssertionError("async runs are not resumable (TrainerConfig refuses trainer.resume)")

    def plan(self, first_step: int) -> Plan:
        self.clocks = (time.perf_counter(), time.process_time())
        return Plan(str(self.ctx.run_dir), first_step, self.ctx.config.train.steps)

    def start_group(self, versions: list[list[int]]) -> Awaitable[FinishedGroup]:
        config = self.ctx.config
        index = next(self.launches)
        task = sample_tasks(self.train_tasks, 1, config.train.seed, index)[0]
        return play_group(self.ctx, self.gate, task, index, versions)

    async def collect(self, step: int) -> Collected:
        # 1. APRIL: top the pool up, train on the first fresh groups that finish, carry the rest over
        config = self.ctx.config
        per_step, max_staleness = config.train.tasks_per_step, config.trainer.max_staleness
        started = time.perf_counter()
        doomed = self.pool.cancel_doomed(oldest_allowed=self.policy_version - max_staleness)
        groups, stale = await self.pool.take(per_step, self.policy_version, max_staleness, self.start_group)
        rollout_s = time.perf_counter() - started
        carried = self.pool.size
        self.pool.top_up(self.start_group)  # the next step's groups start now and play during the update
        episodes = [episode for group in groups for episode in group.episodes]
        require_some_usable(episodes, f"step {step}", config.rollout.infra_attempts)
        # 2. credit now; the loop runs the update, during which the pool's groups keep generating
        credited = await assign_credit(self.ctx, episodes, [group.task for group in groups])
        staleness = [self.policy_version - v for group in groups for v in group.usable_versions()]
        self.policy_version += 1 if credited.samples else 0
        self.logged = {
            **rollout_metrics(episodes),
            **credited.metrics,
            "rollout_s": rollout_s,
            "staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
            "staleness_max": float(max(staleness, default=0)),
            "dropped_stale_groups": float(doomed + len(stale)),
            "carried_over_groups": float(carried),
            "weights_version": float(self.gate.version),
        }
        return Collected(credited.samples, (episodes, credited))

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        assert collected is not None
        episodes: list[Episode] = collected.payload[0]
        credited: Credited = collected.payload[1]
        record_step(self.ctx, step, episodes, credited, update)
        counted = self.count_env_steps(episodes)  # the groups trained on only: see the module docstring
        log_metrics(self.ctx, step, {**self.logged, **counted, **update.metrics, **_loop_times(*self.clocks)})

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        await self.pool.aclose()  # groups still playing would compete with the evaluation


@dataclass(frozen=True)
class ThroughGate:
    """Async mode's `WeightsOut`: the learner trains its own copy, so nothing is released before the update;
    after it, the new weights go into the engine between generations (`WeightsGate.load`)."""

    gate: WeightsGate

    def before(self) -> None:
        """The engine keeps sampling during the update."""

    async def after(self, learner: Learner, changed: bool) -> dict[str, float]:
        if not changed:
            return {"sync_s": 0.0, "sync_wait_s": 0.0}
        wait_s, sync_s = await self.gate.load(lambda: publish_weights(self.gate.engine, learner))
        return {"sync_s": sync_s, "sync_wait_s": wait_s}


class WeightsGate:
    """The engine behind a readers-writer gate: `generate` calls run concurrently (the engine batches them);
    `load` waits for the calls in flight, holds new ones, changes the weights, bumps `version`, reopens."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine
        self.version = 0
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> tuple[Completion, int]:
        """One completion and the weights version that sampled all of it."""
        while not self._open.is_set():
            await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            return await self.engine.generate(prompt_ids, params), self.version
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def load(self, load_weights: Callable[[], object]) -> tuple[float, float]:
        """Run `load_weights` (in a worker thread) between generations; (seconds waited, seconds loading)."""
        self._open.clear()
        try:
            started = time.perf_counter()
            await self._idle.wait()
            waited = time.perf_counter() - started
            await asyncio.to_thread(load_weights)
            self.version += 1
            return waited, time.perf_counter() - started - waited
        finally:
            self._open.set()


class VersionRecorder:
    """An `Engine` for one episode: generates through the gate and appends each turn's weights version."""

    def __init__(self, gate: WeightsGate, versions: list[int]) -> None:
        self.gate, self.versions = gate, versions

    @property
    def tokenizer(self) -> Any:
        return self.gate.engine.tokenizer

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        completion, version = await self.gate.generate(prompt_ids, params)
        self.versions.append(version)
        return completion


@dataclass(frozen=True)
class FinishedGroup:
    """All G episodes of one task, per episode the weights version that sampled each turn, and the task."""

    episodes: tuple[Episode, ...]
    versions: tuple[tuple[int, ...], ...]  # [G][T_i]
    task: Task = field(default_factory=dict)

    @property
    def oldest_version(self) -> int | None:
        return min((v for turns in self.versions for v in turns), default=None)

    def usable_versions(self) -> list[int]:
        """Versions of the turns of the episodes that are training signal (not infrastructure failures)."""
        return [
            v
            for episode, turns in zip(self.episodes, self.versions, strict=True)
            if not episode.is_infra_failure
            for v in turns
        ]


def is_stale(oldest_version: int | None, policy_version: int, max_staleness: int) -> bool:
    """True when a group whose oldest turn is `oldest_version` is too old to train `policy_version` on."""
    return oldest_version is not None and policy_version - oldest_version > max_staleness


def take_fresh(
    finished: Sequence[FinishedGroup], count: int, policy_version: int, max_staleness: int
) -> tuple[list[FinishedGroup], list[FinishedGroup], list[FinishedGroup]]:
    """(up to `count` fresh groups in finishing order, the stale ones, the fresh ones left for later)."""
    fresh = [g for g in finished if not is_stale(g.oldest_version, policy_version, max_staleness)]
    stale = [g for g in finished if is_stale(g.oldest_version, policy_version, max_staleness)]
    return fresh[:count], stale, fresh[count:]


@dataclass
class _Running:
    task: asyncio.Task[FinishedGroup]
    versions: list[list[int]]  # per member, filled in as turns are sampled

    @property
    def oldest_version(self) -> int | None:
        return min((v for turns in self.versions for v in turns), default=None)


class GroupPool:
    """Groups in flight (asyncio tasks) and groups finished but not yet trained on, in finishing order; it
    holds `capacity` of them in all. The carry-over queue of APRIL."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.running: list[_Running] = []
        self.finished: list[FinishedGroup] = []

    @property
    def size(self) -> int:
        return len(self.running) + len(self.finished)

    def top_up(self, start: Callable[[list[list[int]]], Awaitable[FinishedGroup]]) -> None:
        """Launch groups until `capacity` are running or waiting; `start(versions)` plays one group."""
        while self.size < self.capacity:
            versions: list[list[int]] = []
            self.running.append(_Running(asyncio.ensure_future(start(versions)), versions))

    def cancel_doomed(self, oldest_allowed: int) -> int:
        """Cancel running groups with a turn sampled before version `oldest_allowed`; how many."""
        doomed = [
            r for r in self.running if r.oldest_version is not None and r.oldest_version < oldest_allowed
        ]
        for running in doomed:
            running.task.cancel()  # the episodes close their sessions as they unwind
            self.running.remove(running)
        return len(doomed)

    async def take(
        self,
        count: int,
        policy_version: int,
        max_staleness: int,
        start: Callable[[list[list[int]]], Awaitable[FinishedGroup]],
    ) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
        """The first `count` fresh groups to finish, and the stale ones dropped meanwhile (replaced by new
        launches). A group that raised a real error (not an infrastructure failure) raises here."""
        taken: list[FinishedGroup] = []
        dropped: list[FinishedGroup] = []
        while True:
            got, stale, self.finished = take_fresh(
                self.finished, count - len(taken), policy_version, max_staleness
            )
            taken += got
            dropped += stale
            if len(taken) == count:
                return taken, dropped
            self.top_up(start)
            done, _ = await asyncio.wait([r.task for r in self.running], return_when=asyncio.FIRST_COMPLETED)
            for running in [r for r in self.running if r.task in done]:
                self.running.remove(running)
                self.finished.append(running.task.result())

    async def aclose(self) -> None:
        """Cancel the groups still running and wait until they have closed their sessions."""
        tasks = [running.task for running in self.running]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running, self.finished = [], []


async def play_group(
    ctx: RunContext, gate: WeightsGate, task: Task, index: int, versions: list[list[int]]
) -> FinishedGroup:
    """All G episodes of `task` (launch number `index`), each turn's weights version appended to
    `versions[member]` as it is sampled. Seeds as `collect_rollouts` with rollout seed `index`."""
    config = ctx.config
    group_id = f"{task.get('id', index)}-{uuid.uuid4().hex[:8]}"
    env_seed = episode_seed(config.train.seed, index)
    versions.extend([] for _ in range(config.train.group_size))

    def recording_engine(member: int) -> VersionRecorder:
        versions[member].clear()  # a re-run starts over
        return VersionRecorder(gate, versions[member])

    async def play(member: int) -> Episode:
        return await play_member(
            ctx.client, lambda: recording_engine(member), config.env.id, task, env_seed, group_id,
            config.sampling, config.rollout, seed_parts=(config.train.seed, index, member), player=ctx.player,
        )  # fmt: skip

    episodes = await run_concurrently([play(member) for member in range(config.train.group_size)])
    # an episode that failed between a generation and its turn has one version more than turns
    turn_versions = tuple(tuple(v[: len(e.turns)]) for v, e in zip(versions, episodes, strict=True))
    return FinishedGroup(tuple(map(with_versions, episodes, turn_versions)), turn_versions, task)


def with_versions(episode: Episode, versions: Sequence[int]) -> Episode:
    """The episode with each turn's sampling weights version in its info (`weights_version`, stored)."""
    turns = tuple(
        replace(turn, info={**turn.info, "weights_version": version})
        for turn, version in zip(episode.turns, versions, strict=True)
    )
    return replace(episode, turns=turns)


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes held by the module's parameters (what the trainer's copy of the policy costs, before grads
    and optimiser state, which sync mode holds too)."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def _loop_times(started: float, started_cpu: float) -> dict[str, float]:
    """`loop_s` and `loop_cpu_s`: wall and process CPU seconds since the loop started."""
    return {"loop_s": time.perf_counter() - started, "loop_cpu_s": time.process_time() - started_cpu}
