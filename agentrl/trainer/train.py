"""`train(config)`: the sync training loop on rank 0, the loop of the ranks that only update, and the switch
to the async loop.

What this is: `sync_loop`, one readable loop (cleanrl style) over training steps with held-out evaluation
before and after; each step samples tasks, plays G episodes per task through the engine, and hands them to
the step every loop shares (`agentrl/trainer/step.py`: credit, update, weights into the engine, records,
checkpoint). In one process the HF and cached engines sample with the very module the optimiser updates, so
putting the new weights into the engine costs nothing. With `trainer.nproc` > 1 (ranks started by
torchrun) rank 0 runs `sync_loop` with an FSDP2-sharded copy of the policy and every rank trains on its
share of rank 0's samples. With `trainer.dp_rollouts` (the default) every rank also plays its share of
each rollout phase (a step's rounds, the held-out evaluations) with an engine of its own
(`agentrl/trainer/dp_rollouts.py`; the other ranks run `rollout_rank_loop`) and the gathered weights are
loaded into every rank's engine (`sync_s`); with `trainer.dp_rollouts=false` rank 0 plays everything, its
engine alone receives the weights, and the other ranks run `update_only_loop`, the same steps without
rollouts, engine or store.
Either way rank 0 alone draws the tasks, assigns credit and writes the store. `loss.kl_coef` > 0 loads a
frozen reference model (the initial weights) on every rank.

`trainer.checkpoint_every` writes resumable checkpoints (`checkpoint.py`); `trainer.resume=runs/<run>`
continues a killed run from its newest one (with several ranks, checkpoints are sharded and resumable with
the same `trainer.nproc`). `trainer.async_mode=true` runs `agentrl/trainer/async_loop.py` instead.

What this is not: a place for the step itself (step.py) or for what a run holds open (run.py). Episodes that
ended in an infrastructure failure are stored but never trained on; a step in which every episode failed so
stops the run (`RolloutError`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from agentrl.config import RunConfig
from agentrl.models import load_tokenizer
from agentrl.tasks import load_tasks
from agentrl.trainer import checkpoint, distributed, dp_rollouts
from agentrl.trainer.async_loop import async_loop
from agentrl.trainer.run import (
    EvalResult,
    RunContext,
    evaluate,
    log_metrics,
    open_run,
    pad_id,
    require_some_usable,
    resume_point,
    rollout_metrics,
    save_final_weights,
)
from agentrl.trainer.step import (
    GatherOnly,
    IntoEngine,
    assign_credit,
    make_learner,
    nothing_to_flush,
    publish_weights,
    record_step,
    save_checkpoint_if_due,
    update_step,
)
from agentrl.trainer.task_sampling import collect_step, record_sampling, resumed_sampler
from agentrl.trainer.update import DataParallel

TrainResult = tuple[EvalResult | None, EvalResult | None, str]
"""(held-out before, held-out after, run directory) on rank 0; (None, None, "") on the other ranks."""
T = TypeVar("T")


async def train(config: RunConfig) -> TrainResult:
    """Run training as this process's rank asks: rank 0 (or the only process) rolls out and updates, the
    other ranks update (and, with `trainer.dp_rollouts`, the default, play their share of the rollouts)."""
    parallel = distributed.init_from_env()
    try:
        dp_rollouts.check_placement(config, parallel)
        if parallel.rank != 0 and dp_rollouts.enabled(config, parallel):
            await rollout_rank_loop(config, parallel)
            return None, None, ""
        if parallel.rank != 0:
            await update_only_loop(config, parallel)
            return None, None, ""
        if config.trainer.async_mode:
            return await async_loop(config, parallel)
        return await sync_loop(config, parallel)
    finally:
        distributed.close(parallel)


async def sync_loop(config: RunConfig, parallel: DataParallel) -> TrainResult:
    """Rank 0 (or the only process): rollouts, then the shared step, one step after the other."""
    resume = resume_point(config)
    async with open_run(config, kind="train", resume=resume) as ctx:
        if dp_rollouts.enabled(config, parallel):  # the other ranks' clients reach the same env service
            urls = [replica.url for replica in ctx.client.replicas]
            await distributed.off_loop(distributed.broadcast, urls, parallel)
            ctx.ranks = dp_rollouts.RolloutRanks(parallel)
        every_rank = ctx.ranks is not None  # every rank's engine receives the new weights
        if config.eval.before and resume is None:
            before = await rollout_phase(ctx, evaluate(ctx, step=0))
        else:
            before = None
        learner = make_learner(config, parallel, ctx.engine.module, pad_id(ctx.engine.tokenizer))
        if resume is not None:
            checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
            publish_weights(ctx.engine, learner, every_rank)  # several ranks: the restored shards
        distributed.broadcast(str(ctx.run_dir), parallel)  # where the other ranks write their shards
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        sampler = resumed_sampler(ctx, train_tasks, resumed=resume is not None)
        first = 1 if resume is None else resume[1].step + 1
        for step in range(first, config.train.steps + 1):
            # 1-2. this step's tasks and rollouts (G episodes per task, batched through the engine): the
            # sampler (`tasks.sampler`) may play extra groups and keep only those that carry a signal
            started, step_cpu = time.perf_counter(), time.process_time()
            collected = await rollout_phase(ctx, collect_step(ctx, sampler, step))
            rollout_s, rollout_cpu_s = time.perf_counter() - started, time.process_time() - step_cpu
            tasks, episodes = collected.tasks, collected.episodes
            require_some_usable(collected.played_episodes, f"step {step}", config.rollout.infra_attempts)
            # 3. the shared step: credit, update, new weights into the engine, records, checkpoint
            credited = await assign_credit(ctx, episodes, tasks)
            update = await update_step(learner, credited.samples, IntoEngine(ctx.engine, every_rank))
            record_step(ctx, step, episodes, credited)
            record_sampling(ctx, step, collected)  # the dropped groups (never trained on) and the draws
            metrics = {
                **rollout_metrics(collected.played_episodes),
                **collected.metrics,
                **credited.metrics,
                **update,
                "rollout_s": rollout_s,
                "rollout_cpu_s": rollout_cpu_s,
                "step_cpu_s": time.process_time() - step_cpu,
            }
            log_metrics(ctx, step, metrics)
            save_checkpoint_if_due(config, step, learner, ctx.run_dir, ctx.run_id, ctx.writer.flush)
        last = config.train.steps
        after = await rollout_phase(ctx, evaluate(ctx, step=last)) if config.eval.after else None
        save_final_weights(ctx)
        return before, after, str(ctx.run_dir)


async def rollout_phase(ctx: RunContext, work: Awaitable[T]) -> T:
    """Rank 0: `work` (which plays episodes), then, with data-parallel rollouts, the word to the other ranks
    that no more play orders come before the loop's next collective."""
    result = await work
    if ctx.ranks is not None:
        await ctx.ranks.end_phase()
    return result


async def rollout_rank_loop(config: RunConfig, parallel: DataParallel) -> None:
    """Ranks > 0 with data-parallel rollouts: `sync_loop`'s collectives in its order, playing this rank's
    share of every rollout phase with an engine of its own, and the same update steps; no store."""
    resume = resume_point(config)
    urls = await distributed.off_loop(distributed.broadcast, None, parallel)
    async with dp_rollouts.open_rollout_rank(config, urls) as mine:

        async def serve() -> None:
            await dp_rollouts.serve_phase(mine.client, mine.engine, config, parallel)

        if config.eval.before and resume is None:
            await serve()
        learner = make_learner(config, parallel, None, pad_id(mine.engine.tokenizer))
        if resume is not None:
            checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
            publish_weights(mine.engine, learner, every_rank=True)
        run_dir = Path(distributed.broadcast(None, parallel))
        first = 1 if resume is None else resume[1].step + 1
        for step in range(first, config.train.steps + 1):
            await serve()
            await update_step(learner, None, IntoEngine(mine.engine, every_rank=True))
            save_checkpoint_if_due(config, step, learner, run_dir, "", nothing_to_flush)
        if config.eval.after:
            await serve()


async def update_only_loop(config: RunConfig, parallel: DataParallel) -> None:
    """Ranks > 0: the same steps as rank 0 on their share of its samples; no env, engine or store."""
    learner = make_learner(config, parallel, None, pad_id(load_tokenizer(config.model)))
    resume = resume_point(config)
    if resume is not None:  # collective, in the same order as rank 0: load, then the gather into its engine
        checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
        distributed.full_state_dict(learner.policy)
    run_dir = Path(distributed.broadcast(None, parallel))
    first = 1 if resume is None else resume[1].step + 1
    for step in range(first, config.train.steps + 1):
        await update_step(learner, None, GatherOnly())
        save_checkpoint_if_due(config, step, learner, run_dir, "", nothing_to_flush)
