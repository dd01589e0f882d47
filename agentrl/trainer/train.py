"""`train(config)`: the sync training loop on rank 0, the loop of the ranks that only update, and the switch
to the async loop.

What this is: `sync_loop`, one readable loop (cleanrl style) over training steps with held-out evaluation
before and after; each step samples tasks, plays G episodes per task through the engine, and hands them to
the step every loop shares (`agentrl/trainer/step.py`: credit, update, weights into the engine, records,
checkpoint). In one process the HF and cached engines sample with the very module the optimiser updates, so
putting the new weights into the engine costs nothing. With `trainer.nproc` > 1 (ranks started by
torchrun) rank 0 runs `sync_loop` with an FSDP2-sharded copy of the policy, every rank trains on its share
of rank 0's samples, and the gathered weights are loaded into rank 0's engine (`sync_s`); the other ranks
run `update_only_loop`, the same steps without rollouts, engine or store. `loss.kl_coef` > 0 loads a frozen
reference model (the initial weights) on every rank.

`trainer.checkpoint_every` writes resumable checkpoints (`checkpoint.py`); `trainer.resume=runs/<run>`
continues a killed run from its newest one (with several ranks, checkpoints are sharded and resumable with
the same `trainer.nproc`). `trainer.async_mode=true` runs `agentrl/trainer/async_loop.py` instead.

What this is not: a place for the step itself (step.py) or for what a run holds open (run.py). Episodes that
ended in an infrastructure failure are stored but never trained on; a step in which every episode failed so
stops the run (`RolloutError`).
"""

from __future__ import annotations

import time
from pathlib import Path

from agentrl.config import RunConfig
from agentrl.models import load_tokenizer
from agentrl.tasks import load_tasks
from agentrl.trainer import checkpoint, distributed
from agentrl.trainer.async_loop import async_loop
from agentrl.trainer.run import (
    EvalResult,
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


async def train(config: RunConfig) -> TrainResult:
    """Run training as this process's rank asks: rank 0 (or the only process) rolls out and updates, the
    other ranks only update."""
    parallel = distributed.init_from_env()
    try:
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
        before = await evaluate(ctx, step=0) if config.eval.before and resume is None else None
        learner = make_learner(config, parallel, ctx.engine.module, pad_id(ctx.engine.tokenizer))
        if resume is not None:
            checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
            publish_weights(ctx.engine, learner)  # several ranks: the restored shards into rank 0's engine
        distributed.broadcast(str(ctx.run_dir), parallel)  # where the other ranks write their shards
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        sampler = resumed_sampler(ctx, train_tasks, resumed=resume is not None)
        first = 1 if resume is None else resume[1].step + 1
        for step in range(first, config.train.steps + 1):
            # 1-2. this step's tasks and rollouts (G episodes per task, batched through the engine): the
            # sampler (`tasks.sampler`) may play extra groups and keep only those that carry a signal
            started, step_cpu = time.perf_counter(), time.process_time()
            collected = await collect_step(ctx, sampler, step)
            rollout_s, rollout_cpu_s = time.perf_counter() - started, time.process_time() - step_cpu
            tasks, episodes = collected.tasks, collected.episodes
            require_some_usable(collected.played_episodes, f"step {step}", config.rollout.infra_attempts)
            # 3. the shared step: credit, update, new weights into the engine, records, checkpoint
            credited = await assign_credit(ctx, episodes, tasks)
            update = await update_step(learner, credited.samples, IntoEngine(ctx.engine))
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
        after = await evaluate(ctx, step=config.train.steps) if config.eval.after else None
        save_final_weights(ctx)
        return before, after, str(ctx.run_dir)


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
