"""`train(config)`: which seat this rank takes in the one training loop (`agentrl/trainer/loop.py`), and the
seats of the sync loop.

What this is: `train`, the rank dispatch, and three `Seat`s of `loop.run_loop`:
- `SyncSeat`, rank 0 (or the only process): each step samples tasks, plays G episodes per task through the
  engine (`trainer/task_sampling.py`), and hands them to the step every loop shares (`trainer/step.py`:
  credit, update, weights into the engine, records, checkpoint), with held-out evaluation before and
  after; it counts the env steps every played episode cost (`train.env_step_budget`). In one process the
  HF and cached engines sample with the very module the optimiser updates, so putting the new weights into
  the engine costs nothing.
- `RolloutRankSeat`, ranks > 0 with `trainer.dp_rollouts` (the default with `trainer.nproc` > 1): every
  rank plays its share of each rollout phase (a step's rounds, the held-out evaluations) with an engine of
  its own (`trainer/dp_rollouts.py`), trains on its share of rank 0's samples with an FSDP2-sharded copy of
  the policy, and loads the gathered weights into its engine (`sync_s`).
- `FollowerSeat`, ranks > 0 with `trainer.dp_rollouts=false` (and SFT's ranks > 0): the same steps without
  rollouts, engine or store; rank 0's engine alone receives the weights.
Either way rank 0 alone draws the tasks, assigns credit and writes the store. `loss.kl_coef` > 0 loads a
frozen reference model (the initial weights) on every rank. `trainer.async_mode=true` seats rank 0 at the
async producer instead (`trainer/async_loop.py`).

`trainer.checkpoint_every` writes resumable checkpoints (`checkpoint.py`); `trainer.resume=runs/<run>`
continues a killed run from its newest one (with several ranks, checkpoints are sharded and resumable with
the same `trainer.nproc`); the loop restores them.

What this is not: the loop (loop.py), the step itself (step.py) or what a run holds open (run.py).
Episodes that ended in an infrastructure failure are stored but never trained on; a step in which every
episode failed so stops the run (`RolloutError`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agentrl.config import RunConfig
from agentrl.models import load_tokenizer
from agentrl.tasks import load_tasks
from agentrl.trainer import distributed, dp_rollouts
from agentrl.trainer.async_loop import async_rank_zero
from agentrl.trainer.loop import Collected, FollowerSeat, LoopResult, Plan, RunOwner, run_loop
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.run import (
    EvalResult,
    Resume,
    RunContext,
    evaluate,
    log_metrics,
    open_run,
    pad_id,
    require_some_usable,
    resume_point,
    rollout_metrics,
    tree_metrics,
)
from agentrl.trainer.step import (
    Credited,
    GatherOnly,
    IntoEngine,
    Learner,
    WeightsOut,
    assign_credit,
    make_learner,
    publish_weights,
    record_step,
)
from agentrl.trainer.task_sampling import (
    StepEpisodes,
    TaskSampler,
    collect_step,
    record_sampling,
    resumed_sampler,
)
from agentrl.trainer.update import UpdateResult

TrainResult = LoopResult
T = TypeVar("T")


async def train(config: RunConfig) -> TrainResult:
    """Run training as this process's rank asks: rank 0 (or the only process) rolls out and updates, the
    other ranks update (and, with `trainer.dp_rollouts`, the default, play their share of the rollouts)."""
    check_model_fits(config)
    parallel = distributed.init_from_env()
    try:
        dp_rollouts.check_placement(config, parallel)
        resume = resume_point(config)
        if parallel.rank != 0 and dp_rollouts.enabled(config, parallel):
            return await rollout_rank(config, parallel, resume)
        if parallel.rank != 0:
            seat = FollowerSeat(config, parallel, rl_learner(config, parallel), GatherOnly())
            return await run_loop(config, seat, resume)
        if config.trainer.async_mode:
            return await async_rank_zero(config, parallel)
        return await sync_rank_zero(config, parallel, resume)
    finally:
        distributed.close(parallel)


def check_model_fits(config: RunConfig) -> None:
    """Refuse, before anything loads, a CPU run whose model of a known shape (`model.random_shape`, or the
    135M alias) cannot fit this machine's available memory (`agentrl.model_shapes.check_fits`)."""
    from agentrl.model_shapes import SHAPES, available_bytes, check_fits, random_shape

    model = config.model
    if model.random_shape:
        shape, name = random_shape(model.random_shape), f"random {model.random_shape}"
    elif model.name == "smollm2-135m-instruct":
        shape, name = SHAPES["smollm2-135m"], model.name
    else:
        return  # an unknown shape is not estimated: the load says what it says
    from agentrl.models import resolve_device

    if resolve_device(model.device).type == "cuda":
        return  # the host's memory is not the device's
    check_fits(name, shape, model.dtype, model.lora.rank, available_bytes())


async def sync_rank_zero(config: RunConfig, parallel: DataParallel, resume: Resume | None) -> TrainResult:
    """Rank 0 (or the only process): open the run, tell data-parallel rollout ranks where the env service
    is, and take the sync seat."""
    async with open_run(config, kind="train", resume=resume) as ctx:
        if dp_rollouts.enabled(config, parallel):  # the other ranks' clients reach the same env service
            urls = [replica.url for replica in ctx.client.replicas]
            await distributed.off_loop(distributed.broadcast, urls, parallel)
            ctx.ranks = dp_rollouts.RolloutRanks(parallel)
        return await run_loop(config, SyncSeat(ctx, parallel, resumed=resume is not None), resume)


async def rollout_rank(config: RunConfig, parallel: DataParallel, resume: Resume | None) -> TrainResult:
    """Ranks > 0 with data-parallel rollouts: learn where the env service is, open an engine and a client."""
    urls = await distributed.off_loop(distributed.broadcast, None, parallel)
    async with dp_rollouts.open_rollout_rank(config, urls) as mine:
        return await run_loop(config, RolloutRankSeat(config, parallel, mine), resume)


async def rollout_phase(ctx: RunContext, work: Awaitable[T]) -> T:
    """Rank 0: `work` (which plays episodes), then, with data-parallel rollouts, the word to the other ranks
    that no more play orders come before the loop's next collective."""
    result = await work
    if ctx.ranks is not None:
        await ctx.ranks.end_phase()
    return result


def rl_learner(config: RunConfig, parallel: DataParallel) -> Callable[[], Learner]:
    """The learner of a rank without an engine of its own (its tokenizer gives the pad id)."""
    return lambda: make_learner(config, parallel, None, pad_id(load_tokenizer(config.model)))


@dataclass
class SyncSeat(RunOwner):
    """Rank 0 of a sync run: plays each step's groups, assigns credit, records; see the module docstring."""

    resumed: bool
    sampler: TaskSampler | None = None
    clocks: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # wall, cpu at start; rollout s, cpu s
    weights_out: WeightsOut = field(init=False)

    def __post_init__(self) -> None:
        # with data-parallel rollouts every rank's engine receives the new weights
        self.weights_out = IntoEngine(self.ctx.engine, every_rank=self.ctx.ranks is not None)

    async def evaluate(self, step: int) -> EvalResult | None:
        return await rollout_phase(self.ctx, evaluate(self.ctx, step))

    def make_learner(self) -> Learner:
        engine = self.ctx.engine
        return make_learner(self.ctx.config, self.parallel, engine.module, pad_id(engine.tokenizer))

    def restored(self, learner: Learner) -> None:
        publish_weights(self.ctx.engine, learner, self.ctx.ranks is not None)  # several ranks: the shards

    def plan(self, first_step: int) -> Plan:
        config = self.ctx.config
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        self.sampler = resumed_sampler(self.ctx, train_tasks, resumed=self.resumed)
        return Plan(str(self.ctx.run_dir), first_step, config.train.steps)

    async def collect(self, step: int) -> Collected:
        # this step's tasks and rollouts (G episodes per task, batched through the engine): the sampler
        # (`tasks.sampler`) may play extra groups and keep only those that carry a signal
        assert self.sampler is not None, "plan() makes the sampler"
        started, step_cpu = time.perf_counter(), time.process_time()
        collected = await rollout_phase(self.ctx, collect_step(self.ctx, self.sampler, step))
        self.clocks = (started, step_cpu, time.perf_counter() - started, time.process_time() - step_cpu)
        infra_attempts = self.ctx.config.rollout.infra_attempts
        require_some_usable(collected.played_episodes, f"step {step}", infra_attempts)
        credited = await assign_credit(self.ctx, collected.episodes, collected.tasks)
        return Collected(credited.samples, (collected, credited))

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        assert collected is not None
        played: StepEpisodes = collected.payload[0]
        credited: Credited = collected.payload[1]
        record_step(self.ctx, step, played.episodes, credited, update)
        record_sampling(self.ctx, step, played)  # the dropped groups (never trained on) and the draws
        _, step_cpu, rollout_s, rollout_cpu_s = self.clocks
        metrics = {
            **rollout_metrics(played.played_episodes),
            **tree_metrics(played.played_episodes),  # {} for flat groups
            **self.count_env_steps(played.played_episodes),  # dropped groups too: the env played them
            **played.metrics,
            **credited.metrics,
            **update.metrics,
            "rollout_s": rollout_s,
            "rollout_cpu_s": rollout_cpu_s,
            "step_cpu_s": time.process_time() - step_cpu,
        }
        log_metrics(self.ctx, step, metrics)


@dataclass
class RolloutRankSeat:
    """A rank > 0 with data-parallel rollouts: plays its share of every rollout phase with its own engine,
    trains on its share of rank 0's samples, loads the gathered weights; no store."""

    config: RunConfig
    parallel: DataParallel
    mine: dp_rollouts.RolloutRank
    run_id: str = ""
    env_steps_total: int = 0  # rank 0 counts
    weights_out: WeightsOut = field(init=False)

    def __post_init__(self) -> None:
        self.weights_out = IntoEngine(self.mine.engine, every_rank=True)

    async def serve(self) -> None:
        await dp_rollouts.serve_phase(self.mine.client, self.mine.engine, self.config, self.parallel)

    async def evaluate(self, step: int) -> EvalResult | None:
        await self.serve()
        return None

    def make_learner(self) -> Learner:
        return make_learner(self.config, self.parallel, None, pad_id(self.mine.engine.tokenizer))

    def restored(self, learner: Learner) -> None:
        publish_weights(self.mine.engine, learner, every_rank=True)

    def plan(self, first_step: int) -> None:
        return None

    async def collect(self, step: int) -> None:
        await self.serve()

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        """Rank 0 records."""

    def flush(self) -> None:
        """No store on this rank."""

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        """Nothing: this rank's engine has had the weights since the last step."""

    def close(self) -> str:
        return ""
