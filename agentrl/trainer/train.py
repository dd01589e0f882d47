"""THE training loop: sample tasks -> G episodes per task -> advantages -> policy update -> record.

What this is: one readable loop (cleanrl style) over training steps, with held-out evaluation before and
after, plus the small functions it calls. In one process the HF engine generates with the very module the
optimiser updates, so the weight sync after an update is a no-op by construction. With `trainer.nproc` > 1
(ranks started by torchrun) rank 0 runs that same loop with an FSDP2-sharded training copy of the policy,
broadcasts each step's samples, every rank trains on its share, and the gathered weights are loaded into
rank 0's engine (`sync_s`); the other ranks run `follow_updates`, the same updates without rollouts.
`loss.kl_coef` > 0 loads a frozen reference model (the initial weights) on every rank.

`trainer.checkpoint_every` writes resumable checkpoints (`checkpoint.py`); `trainer.resume=runs/<run>`
continues a killed run from its newest one.

With several ranks, checkpoints are sharded (every rank writes its part) and resumable with the same
`trainer.nproc`.

`trainer.async_mode=true` hands the run to `async_loop.async_lead` (rollouts of step n+1 overlapping the
update of step n, with a staleness bound and APRIL partial rollouts).

What this is not (yet): vLLM weight sync. Episodes that ended in an infrastructure failure are stored but
never trained on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console

from agentrl.agent.engines.cached import CachedEngine, make_engine
from agentrl.agent.engines.hf import HFEngine
from agentrl.agent.engines.openai import OpenAIEngine
from agentrl.agent.rollout import collect_rollouts
from agentrl.client import EnvClient
from agentrl.config import RunConfig, to_dict
from agentrl.credit import episodes_to_batch, estimate, split_by_episode
from agentrl.credit.metrics import credit_metrics
from agentrl.errors import ConfigError
from agentrl.models import load_model, load_tokenizer
from agentrl.service.embedded import EmbeddedService
from agentrl.store.repository import create_run, finish_run, open_store, resume_run
from agentrl.store.tensorboard import export_run_events
from agentrl.store.wandb_sink import WandbSink
from agentrl.store.writer import StoreWriter
from agentrl.tasks import Task, load_tasks, sample_tasks
from agentrl.trainer import checkpoint, distributed
from agentrl.trainer.answer_probs import attach_answer_probs
from agentrl.trainer.samples import TrainSample, episode_to_sample
from agentrl.trainer.update import DataParallel, make_optimizer, policy_update
from agentrl.types import Episode

console = Console(stderr=True)
EVAL_SEED = 0  # sampler seed of every held-out evaluation, so before/after see the same random stream


@dataclass
class RunContext:
    """What one run holds open: its model, engine, env client, store writer and output folder."""

    config: RunConfig
    run_id: str
    run_dir: Path
    engine: Any  # HFEngine | CachedEngine (with `.model`), or OpenAIEngine for evaluation
    client: EnvClient
    writer: StoreWriter
    store: Any
    sink: WandbSink | None = None  # the W&B mirror, when `metrics.wandb_project` is set


@dataclass
class Learner:
    """What the update trains: the policy (the engine's own module in one process, else an FSDP2-sharded
    copy), its optimiser and schedule, the frozen reference for KL (or None), and this rank's place."""

    policy: torch.nn.Module
    optimizer: Any
    scheduler: Any
    reference: torch.nn.Module | None
    parallel: DataParallel


@dataclass(frozen=True)
class EvalResult:
    """Held-out success over the episodes that did not fail for infrastructure reasons."""

    success_rate: float
    mean_reward: float
    episodes: int
    infra_failures: int


async def train(config: RunConfig) -> tuple[EvalResult | None, EvalResult | None, str]:
    """Run training; return (held-out before, held-out after, run directory) — on rank 0; other ranks
    follow the updates and return (None, None, "")."""
    parallel = distributed.init_from_env()
    try:
        if parallel.rank != 0:
            await follow_updates(config, parallel)
            return None, None, ""
        return await lead(config, parallel)
    finally:
        distributed.close(parallel)


async def lead(config: RunConfig, parallel: DataParallel) -> tuple[EvalResult | None, EvalResult | None, str]:
    """Rank 0 (or the only process): rollouts, credit, update, sync, records."""
    if config.trainer.async_mode:  # rollouts overlapping updates under a staleness bound: async_loop.py
        from agentrl.trainer.async_loop import async_lead  # it builds on this module's functions

        return await async_lead(config, parallel)
    resume = resume_point(config)
    async with open_run(config, kind="train", resume=resume) as ctx:
        before = await evaluate(ctx, step=0) if config.eval.before and resume is None else None
        learner = make_learner(config, parallel, ctx.engine.model)
        if resume is not None:
            checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
            sync_engine(ctx.engine, learner)  # several ranks: the restored shards into rank 0's engine
        distributed.broadcast(str(ctx.run_dir), parallel)  # where the other ranks write their shards
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        first = 1 if resume is None else resume[1].step + 1
        for step in range(first, config.train.steps + 1):
            # 1. sample this step's tasks
            tasks = sample_tasks(train_tasks, config.train.tasks_per_step, config.train.seed, step)
            # 2. rollouts: G episodes per task, batched through the engine
            started, step_cpu = time.perf_counter(), time.process_time()
            torch.manual_seed(config.train.seed * 1_000_003 + step)
            episodes = await rollout(ctx, tasks, config.train.group_size, config.sampling, seed=step)
            rollout_s, rollout_cpu_s = time.perf_counter() - started, time.process_time() - step_cpu
            # 3. credit assignment on the episodes that are real training signal
            started = time.perf_counter()
            usable = [episode for episode in episodes if not episode.is_infra_failure]
            if config.credit.estimator == "igpo":  # p_t under the current policy, before this update
                answers = {str(task["id"]): str(task["answer"]) for task in tasks}
                usable = await asyncio.to_thread(
                    attach_answer_probs,
                    usable,
                    answers,
                    ctx.engine.model,
                    ctx.engine.tokenizer,
                    config.credit.answer,
                )
            advantages, credit_stats = compute_advantages(usable, config)
            credit_s = time.perf_counter() - started
            # 4. policy update on every rank, then the new weights into the engine
            started = time.perf_counter()
            keep_all = config.loss.kl_coef > 0 or config.loss.entropy_coef > 0
            samples = training_samples(usable, advantages, config.rollout.max_context_tokens, keep_all)
            shared = distributed.broadcast(samples, parallel)
            free_engine_memory(ctx.engine)  # vLLM with engine.vllm.sleep_level > 0: its GPU memory
            # in a worker thread, so the event loop keeps answering the env service's WebSocket pings
            update = await asyncio.to_thread(update_policy, config, learner, shared, pad_id(ctx))
            update_s = time.perf_counter() - started
            sync_s = sync_engine(ctx.engine, learner) if update else 0.0
            # 5. record episodes and metrics
            ctx.writer.record_episodes(ctx.run_id, step, "train", usable, advantages)
            ctx.writer.record_episodes(ctx.run_id, step, "train", infra_only(episodes), None)
            metrics = {
                **rollout_metrics(episodes),
                **credit_stats,
                **update,
                "rollout_s": rollout_s,
                "credit_s": credit_s,
                "update_s": update_s,
                "sync_s": sync_s,
                "rollout_cpu_s": rollout_cpu_s,
                "step_cpu_s": time.process_time() - step_cpu,
                "trained_episodes": float(len(samples)),
            }
            log_metrics(ctx, step, metrics)
            every = config.trainer.checkpoint_every
            if every and step % every == 0:
                ctx.writer.flush()  # the store holds this step before the checkpoint says it is done
                state = checkpoint.CheckpointState(step=step, run_id=ctx.run_id, weights_version=step)
                checkpoint.save(
                    ctx.run_dir,
                    state,
                    learner.policy,
                    learner.optimizer,
                    learner.scheduler,
                    parallel=parallel,
                )
        after = await evaluate(ctx, step=config.train.steps) if config.eval.after else None
        save_checkpoint(ctx)
        return before, after, str(ctx.run_dir)


async def follow_updates(config: RunConfig, parallel: DataParallel) -> None:
    """Ranks > 0: the same updates as rank 0 on their share of its samples; no env, engine or store."""
    model, tokenizer = load_model(config.model)
    learner = make_learner(config, parallel, model)
    resume = resume_point(config)
    if resume is not None:  # collective, in the same order as rank 0: load, then the gather into its engine
        checkpoint.load(resume[0], learner.policy, learner.optimizer, learner.scheduler, parallel)
        distributed.full_state_dict(learner.policy)
    run_dir = Path(distributed.broadcast(None, parallel))
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    first = 1 if resume is None else resume[1].step + 1
    for step in range(first, config.train.steps + 1):
        if update_policy(config, learner, distributed.broadcast(None, parallel), pad):
            distributed.full_state_dict(learner.policy)  # the gather is collective: rank 0 keeps the result
        every = config.trainer.checkpoint_every
        if every and step % every == 0:  # rank 0 writes state.json and the rename; this rank its shards
            state = checkpoint.CheckpointState(step=step, run_id="", weights_version=step)
            checkpoint.save(
                run_dir, state, learner.policy, learner.optimizer, learner.scheduler, parallel=parallel
            )


def make_learner(config: RunConfig, parallel: DataParallel, engine_model: torch.nn.Module) -> Learner:
    """The trained module, optimiser, schedule and KL reference for this rank."""
    if parallel.world_size == 1:
        policy = engine_model
    else:
        policy = distributed.shard_model(load_model(config.model)[0])
    if parallel.world_size > 1 and (config.model.lora.rank or config.model.lora.adapter):
        raise ConfigError("LoRA with trainer.nproc > 1 is not supported yet; use one process or full weights")
    reference = None
    if config.loss.kl_coef > 0:  # the initial policy: the base weights (plus the starting adapters, if any)
        reference = load_model(config.model)[0].eval().requires_grad_(False)
    optimizer, scheduler = make_optimizer(policy, config.optim)
    return Learner(policy, optimizer, scheduler, reference, parallel)


def free_engine_memory(engine: Any) -> None:
    """Before a sync-mode update: a vLLM engine with `engine.vllm.sleep_level` > 0 frees its GPU memory for
    the trainer (`VLLMEngine.sleep`); other engines share the trainer's module and hold nothing extra."""
    from agentrl.agent.engines.vllm import VLLMEngine

    if isinstance(engine, VLLMEngine):
        engine.sleep()


def sync_engine(engine: Any, learner: Learner) -> float:
    """Seconds to put the updated weights into the engine: 0 for hf/cached in one process (the engine samples
    with the very module the optimiser updates); with several ranks, the gathered shards into rank 0's
    engine module; for vllm, also that module's weights into vLLM's own copy (`VLLMEngine.push_weights`)."""
    from agentrl.agent.engines.vllm import VLLMEngine

    pushes = isinstance(engine, VLLMEngine)
    if learner.policy is engine.model and not pushes:
        return 0.0
    started = time.perf_counter()
    if learner.policy is not engine.model:
        engine.model.load_state_dict(distributed.full_state_dict(learner.policy))
    if pushes:
        engine.push_weights(engine.model.state_dict())
    return time.perf_counter() - started


async def run_eval(config: RunConfig) -> EvalResult:
    """Held-out evaluation only (`agentrl eval`)."""
    async with open_run(config, kind="eval") as ctx:
        return await evaluate(ctx, step=0)


async def evaluate(ctx: RunContext, step: int) -> EvalResult:
    """Greedy held-out success rate on the first `eval.num_tasks` tasks of the eval split."""
    config = ctx.config
    tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[
        : config.eval.num_tasks
    ]
    sampling = replace(config.sampling, temperature=config.eval.temperature)
    torch.manual_seed(EVAL_SEED)  # the same sampler seed before and after training (and for every run)
    episodes = await rollout(ctx, tasks, group_size=1, sampling=sampling, seed=0)
    ctx.writer.record_episodes(ctx.run_id, step, "eval", episodes, None)
    result = summarise_eval(episodes)
    log_metrics(ctx, step, {f"eval/{k}": float(v) for k, v in vars(result).items()})
    return result


async def rollout(
    ctx: RunContext, tasks: Sequence[Task], group_size: int, sampling: Any, seed: int
) -> list[Episode]:
    config = ctx.config
    return await collect_rollouts(
        ctx.client,
        ctx.engine,
        config.env.id,
        tasks,
        group_size,
        sampling,
        config.rollout,
        seed=seed,
        progress=console.is_terminal,
    )


def compute_advantages(
    episodes: Sequence[Episode], config: RunConfig
) -> tuple[list[list[float]], dict[str, float]]:
    """Per-episode, per-turn advantages from the configured estimator, and the credit metrics."""
    if not episodes:
        return [], {}
    batch = episodes_to_batch(episodes)
    values = estimate(config.credit.estimator, batch, **dict(config.credit.options))
    return split_by_episode(values, batch), credit_metrics(batch, values)


def training_samples(
    episodes: Sequence[Episode],
    advantages: Sequence[Sequence[float]],
    max_length: int,
    keep_all: bool = False,
) -> list[TrainSample]:
    """Token samples of the episodes that carry a training signal.

    An episode whose advantage is 0 at every step contributes nothing to the PPO term, so unless `keep_all`
    (a KL or entropy term gives every episode a gradient) it is left out of the update, as DAPO's dynamic
    sampling does; this saves most of the update time when many groups are all-correct or all-wrong.
    """
    return [
        episode_to_sample(episode, advantage, max_length)
        for episode, advantage in zip(episodes, advantages, strict=True)
        if keep_all or any(value != 0.0 for value in advantage)
    ]


def update_policy(
    config: RunConfig, learner: Learner, samples: list[TrainSample] | None, pad: int
) -> dict[str, float]:
    """One PPO-clip update over the step's samples (no-op when no episode carries a signal)."""
    if not samples:
        return {}
    return policy_update(
        learner.policy,
        learner.optimizer,
        learner.scheduler,
        samples,
        pad,
        config.loss,
        config.update,
        ref_model=learner.reference,
        optim_cfg=config.optim,
        temperature=config.sampling.temperature,
        parallel=learner.parallel,
    )


def infra_only(episodes: Sequence[Episode]) -> list[Episode]:
    return [episode for episode in episodes if episode.is_infra_failure]


def rollout_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Reward, success, turn and validity statistics of one step's episodes."""
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    turns = [turn for episode in usable for turn in episode.turns]
    return {
        "reward_mean": _mean([episode.reward for episode in usable]),
        "success_rate": _mean([float(episode.success) for episode in usable]),
        "turns_mean": _mean([float(len(episode.turns)) for episode in usable]),
        "invalid_turn_rate": _mean([float(turn.invalid) for turn in turns]),
        "completion_tokens_mean": _mean([float(len(turn.completion_ids)) for turn in turns]),
        "infra_failures": float(len(episodes) - len(usable)),
        "infra_reruns": float(sum(episode.attempts - 1 for episode in episodes)),
        "episodes": float(len(episodes)),
    }


def summarise_eval(episodes: Sequence[Episode]) -> EvalResult:
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    return EvalResult(
        success_rate=_mean([float(episode.success) for episode in usable]),
        mean_reward=_mean([episode.reward for episode in usable]),
        episodes=len(usable),
        infra_failures=len(episodes) - len(usable),
    )


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def pad_id(ctx: RunContext) -> int:
    tokenizer = ctx.engine.tokenizer
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)


def log_metrics(ctx: RunContext, step: int, metrics: Mapping[str, float]) -> None:
    """One line on the console, one line in runs/<run>/metrics.jsonl, rows in the store, a W&B step when
    configured (and, when the run ends, TensorBoard event files in runs/<run>/tensorboard/)."""
    record = {"step": step, **{key: round(float(value), 6) for key, value in metrics.items()}}
    with (ctx.run_dir / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    ctx.writer.record_metrics(ctx.run_id, step, metrics)
    if ctx.sink is not None:
        ctx.sink.log(step, metrics)
    shown = "  ".join(f"{key}={value:.4g}" for key, value in metrics.items())
    console.print(f"[bold]step {step}[/bold]  {shown}")


def save_checkpoint(ctx: RunContext) -> Path:
    """Save the trained weights and tokenizer; `model.name=<this path>` loads them again. With LoRA only
    the adapters are saved: `model.lora.adapter=<this path>` (same `model.name`) loads them."""
    path = ctx.run_dir / "final"
    ctx.engine.model.save_pretrained(path)
    ctx.engine.tokenizer.save_pretrained(path)
    console.print(f"saved checkpoint to {path}")
    return path


def resume_point(config: RunConfig) -> tuple[Path, checkpoint.CheckpointState] | None:
    """The checkpoint `trainer.resume` points at (its newest), or None when not resuming."""
    if config.trainer.resume is None:
        return None
    found = checkpoint.latest(Path(config.trainer.resume))
    if found is None:
        raise ConfigError(
            f"trainer.resume={config.trainer.resume}: no checkpoint in its checkpoints/ folder; "
            "runs are resumable when trained with trainer.checkpoint_every > 0"
        )
    return found, checkpoint.read_state(found)


@asynccontextmanager
async def open_run(
    config: RunConfig, kind: str, resume: tuple[Path, checkpoint.CheckpointState] | None = None
) -> AsyncIterator[RunContext]:
    """Open everything a run needs and close it all, in reverse order, whatever happens. Resuming reopens
    the checkpoint's run (same id and folder) and drops what it recorded after the checkpoint."""
    store = open_store(config.store.url)
    if resume is None:
        run_dir = make_run_dir(config, kind)
        run_id = create_run(store, run_dir.name, config.task, to_dict(config))
    else:
        run_dir, run_id = resume[0].parents[1], resume[1].run_id
        resume_run(store, run_id, after_step=resume[1].step)
        trim_metrics_file(run_dir / "metrics.jsonl", after_step=resume[1].step)
    status = "failed"
    async with AsyncExitStack() as stack:
        writer = stack.enter_context(StoreWriter(store))
        service_url = config.service.url or start_service(stack, config, run_dir)
        client = await stack.enter_async_context(EnvClient(service_url, config=config.service.client))
        engine = build_engine(config, kind)
        stack.push_async_callback(engine.aclose)
        sink = WandbSink.open(config.metrics, run_id, run_dir.name, run_dir, to_dict(config))
        try:
            yield RunContext(config, run_id, run_dir, engine, client, writer, store, sink)
            status = "finished"
        finally:
            if sink is not None:
                sink.close(status == "finished")
            writer.flush()
            finish_run(store, run_id, status)
            export_run_events(store, run_id, run_dir / "tensorboard")


def start_service(stack: AsyncExitStack, config: RunConfig, run_dir: Path) -> str:
    """Start an embedded env service on 127.0.0.1 for this run; it stops when the run ends."""
    env_kwargs = {config.env.id: dict(config.env.kwargs)} if config.env.kwargs else {}
    service = stack.enter_context(EmbeddedService(log_path=run_dir / "service.log", env_kwargs=env_kwargs))
    return str(service.url)


def build_engine(config: RunConfig, kind: str) -> Any:
    """The configured engine (see `EngineConfig.kind`); an `openai` engine only evaluates."""
    engines = config.engine
    if engines.kind == "openai":
        if kind != "eval":
            raise ConfigError("engine.kind=openai can evaluate but not train (its server owns the weights)")
        return OpenAIEngine(load_tokenizer(config.model), engines.openai)  # prompts are rendered here
    if engines.kind == "vllm":  # checks for vllm and a GPU before loading anything
        from agentrl.agent.engines.vllm import create_vllm_engine

        if engines.vllm.sleep_level and config.trainer.async_mode:
            raise ConfigError(
                "engine.vllm.sleep_level > 0 needs trainer.async_mode=false: async rollouts sample while "
                "the update runs, so vLLM cannot give its memory up; set engine.vllm.sleep_level=0"
            )

        return create_vllm_engine(config.model, engines.vllm, nproc=config.trainer.nproc)
    model, tokenizer = load_model(config.model)
    if engines.kind == "hf" or hasattr(model, "peft_config"):  # LoRA: the kernels read plain weights
        return HFEngine(model, tokenizer, engines.hf)
    if engines.kind == "cached":
        return CachedEngine(model, tokenizer, engines.cached)
    return make_engine(model, tokenizer, engines.cached, engines.hf)


def trim_metrics_file(path: Path, after_step: int) -> None:
    """Drop the lines of steps after `after_step` (written before a crash) from a metrics.jsonl."""
    if path.is_file():
        kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= after_step]
        path.write_text("".join(line + "\n" for line in kept))


def make_run_dir(config: RunConfig, kind: str) -> Path:
    """runs/<name>/ with the resolved config saved in it."""
    name = config.name or f"{config.task}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(config.runs_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
    return run_dir
