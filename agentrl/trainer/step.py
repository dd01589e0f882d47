"""One training step, the same for every seat: credit -> samples -> update -> new weights out -> records.

What this is: the parts of the step that the one training loop (`agentrl/trainer/loop.py`) and its seats
(`trainer/train.py`, `trainer/async_loop.py`, `trainer/sft.py`) share; the seats differ only in how
episodes (or demonstrations) arrive. In order:
    1. `assign_credit`: the episodes that are training signal (not infrastructure failures), prepared with
       what the estimator declares it needs (`EstimatorEntry.needs`, made by `PREPARATIONS`), advantages
       per turn, and the token samples that carry a signal.
    2. `update_step`: rank 0's samples to every rank, the engine's memory released, one PPO update of the
       `Learner` in a worker thread (the event loop keeps answering the env service meanwhile), then the new
       weights out through a `WeightsOut` (into the engine directly, through the async loop's gate, or, on
       ranks without an engine, only the collective gather). Its `UpdateResult` holds the metrics and the
       trainer's log-probs of each sample's tokens under the weights the update started from.
    3. `record_step`: the episodes, their advantages and each trained turn's trainer log-probs (mapped back
       from the samples: `trainer_turn_logprobs`) into the store.
    4. `save_checkpoint_if_due`: a resumable checkpoint every `trainer.checkpoint_every` steps.

What this is not: a loop, or a place that knows engine internals: engines are reached through
`PolicyEngine` (`module`, `load_weights`, `release_memory`, `retake_memory`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import torch
from transformers import PreTrainedModel

from agentrl.agent.engines.base import PolicyEngine
from agentrl.config import RunConfig
from agentrl.credit import entry, episodes_to_batch, estimate, split_by_episode
from agentrl.credit.metrics import credit_metrics
from agentrl.errors import ConfigError
from agentrl.memory import return_free_memory
from agentrl.models import load_model
from agentrl.tasks import Task
from agentrl.trainer import checkpoint, distributed
from agentrl.trainer.answer_probs import attach_answer_probs
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.peak_memory import sub_phase
from agentrl.trainer.recompute import recompute_mlps
from agentrl.trainer.run import RunContext
from agentrl.trainer.samples import (
    TrainSample,
    completion_spans,
    copied_turns,
    episode_to_samples,
    segment_turns,
    tree_keys,
    turn_values,
)
from agentrl.trainer.transformers_compat import enable_activation_checkpointing
from agentrl.trainer.update import UpdateResult, ppo_update_and_logprobs
from agentrl.types import Episode


@dataclass
class Learner:
    """What the update trains on this rank: the policy (the engine's own module in one sync process, a copy
    in async mode, an FSDP2-sharded copy with several ranks), its optimiser and schedule, the frozen
    reference for KL (or None), this rank's place, and the run config's loss and update settings."""

    config: RunConfig
    policy: torch.nn.Module
    optimizer: Any
    scheduler: Any
    reference: torch.nn.Module | None
    parallel: DataParallel
    pad_id: int

    def update(self, samples: Sequence[TrainSample] | None) -> UpdateResult:
        """One PPO-clip update over `samples`, with the trainer's log-probs of their tokens
        (`update.ppo_update_and_logprobs`); no metrics (nothing changes) when no sample carries a signal.
        The gradients are dropped after it (the next update starts from none), so that they do not sit
        beside the next step's rollouts (a copy of the weights' size in fp32)."""
        if not samples:
            return UpdateResult({})
        try:
            return self._update(samples)
        finally:
            self.optimizer.zero_grad(set_to_none=True)

    def _update(self, samples: Sequence[TrainSample]) -> UpdateResult:
        config = self.config
        return ppo_update_and_logprobs(
            self.policy,
            self.optimizer,
            self.scheduler,
            list(samples),
            self.pad_id,
            config.loss,
            config.update,
            ref_model=self.reference,
            optim_cfg=config.optim,
            temperature=config.sampling.temperature,
            parallel=self.parallel,
        )

    @property
    def sharded(self) -> bool:
        return self.parallel.world_size > 1


def make_learner(
    config: RunConfig, parallel: DataParallel, trained: torch.nn.Module | None, pad_id: int
) -> Learner:
    """This rank's learner. `trained` is the module to optimise in place (one process); with several ranks
    every rank trains an FSDP2-sharded copy of the configured model instead."""
    if parallel.world_size > 1:
        if config.model.lora.rank or config.model.lora.adapter:
            raise ConfigError(
                "LoRA with trainer.nproc > 1 is not supported yet; use one process or full weights"
            )
        policy = distributed.shard_model(load_model(config.model)[0])
    elif trained is None:
        raise ConfigError("this engine holds no trainable weights (engine.kind=openai only evaluates)")
    else:
        policy = trained
    if config.update.activation_checkpointing:
        enable_activation_checkpointing(policy)
    elif config.update.recompute_mlp:  # full checkpointing recomputes the MLPs already
        recompute_mlps(policy)
    reference = None
    if config.loss.kl_coef > 0:  # the initial policy: the base weights (plus the starting adapters, if any)
        reference = load_model(config.model)[0].eval().requires_grad_(False)
    optimizer, scheduler = make_optimizer(policy, config.optim)
    return Learner(config, policy, optimizer, scheduler, reference, parallel, pad_id)


# ---- 1. credit ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleSource:
    """Where a training sample comes from: the episode (its index in the step's usable episodes) and the
    positions, in that episode's turns, of the turns it holds (`samples.segment_turns`)."""

    episode: int
    turns: tuple[int, ...]


@dataclass(frozen=True)
class Credited:
    """A step's episodes after credit assignment: the usable ones (prepared for the estimator), their
    per-turn advantages, the samples that carry a signal, the credit metrics (with `credit_s`), and where
    each sample comes from (`sources`, one per sample; `sample_sources`)."""

    usable: list[Episode]
    advantages: list[list[float]]
    samples: list[TrainSample]
    metrics: dict[str, float]
    sources: list[SampleSource]


Preparation = Callable[[RunContext, list[Episode], Sequence[Task]], Awaitable[list[Episode]]]


async def measure_answer_probs(
    ctx: RunContext, episodes: list[Episode], tasks: Sequence[Task]
) -> list[Episode]:
    """IGPO's p_t under the current policy (before this update), in a worker thread."""
    module = ctx.engine.module
    if module is None:
        raise ConfigError("credit.estimator=igpo measures answer probabilities with an in-process model")
    answers = {str(task["id"]): str(task["answer"]) for task in tasks}
    return await asyncio.to_thread(
        attach_answer_probs,
        episodes,
        answers,
        cast(PreTrainedModel, module),
        ctx.engine.tokenizer,
        ctx.config.credit.answer,
    )


PREPARATIONS: Mapping[str, Preparation] = {"answer_probs": measure_answer_probs}
"""How the trainer makes each thing an estimator may need (`agentrl.credit.Need`)."""


async def assign_credit(ctx: RunContext, episodes: Sequence[Episode], tasks: Sequence[Task]) -> Credited:
    """Phase 1: advantages for the episodes that are training signal, and their token samples."""
    config = ctx.config
    started = time.perf_counter()
    usable = [episode for episode in episodes if not episode.is_infra_failure]
    for need in entry(config.credit.estimator).needs:
        usable = await PREPARATIONS[need](ctx, usable, tasks)
    advantages, stats = compute_advantages(usable, config)
    keep_all = config.loss.kl_coef > 0 or config.loss.entropy_coef > 0
    samples = training_samples(usable, advantages, config.rollout.max_context_tokens, keep_all)
    sources = sample_sources(usable, advantages, keep_all)
    metrics = {**stats, "credit_s": time.perf_counter() - started, "trained_episodes": float(len(samples))}
    return Credited(usable, advantages, samples, metrics, sources)


def compute_advantages(
    episodes: Sequence[Episode], config: RunConfig
) -> tuple[list[list[float]], dict[str, float]]:
    """Per-episode, per-turn advantages from the configured estimator, and the credit metrics."""
    if not episodes:
        return [], {}
    batch = episodes_to_batch(episodes)
    values = estimate(config.credit.estimator, batch, config.credit.settings)
    return split_by_episode(values, batch), credit_metrics(batch, values)


def training_samples(
    episodes: Sequence[Episode],
    advantages: Sequence[Sequence[float]],
    max_length: int,
    keep_all: bool = False,
) -> list[TrainSample]:
    """Token samples of the episodes that carry a training signal.

    An episode whose advantage is 0 at every step it played contributes nothing to the PPO term (a tree
    branch's copied prefix turns are context only: `samples.copied_turns`), so unless `keep_all`
    (a KL or entropy term gives every episode a gradient) it is left out of the update, as DAPO's dynamic
    sampling does; this saves most of the update time when many groups are all-correct or all-wrong.
    Each sample carries its tree's key (`samples.tree_keys`), by which the shared-prefix update packs a
    group of several trees tree by tree.
    """
    return [
        dataclasses.replace(sample, tree_key=tree)
        for episode, advantage, tree in zip(episodes, advantages, tree_keys(episodes), strict=True)
        if keep_all or carries_signal(episode, advantage)
        for sample in episode_to_samples(episode, advantage, max_length)  # one per segment (harness episodes)
    ]


def carries_signal(episode: Episode, advantages: Sequence[float]) -> bool:
    """Whether any turn the episode played itself (not a tree branch's copied prefix) has an advantage."""
    return any(value != 0.0 for value in advantages[copied_turns(episode) :])


def sample_sources(
    episodes: Sequence[Episode], advantages: Sequence[Sequence[float]], keep_all: bool = False
) -> list[SampleSource]:
    """Where each sample of `training_samples(episodes, advantages, ..., keep_all)` comes from, in order."""
    return [
        SampleSource(index, turns)
        for index, (episode, advantage) in enumerate(zip(episodes, advantages, strict=True))
        if keep_all or carries_signal(episode, advantage)
        for turns in segment_turns(episode)
    ]


def trainer_turn_logprobs(
    episodes: Sequence[Episode],
    sources: Sequence[SampleSource],
    samples: Sequence[TrainSample],
    logprobs: Sequence[torch.Tensor | None],
) -> list[list[list[float] | None]]:
    """Per episode, per turn: the trainer's log-probs of the turn's sampled tokens (`UpdateResult.logprobs`
    of the samples, mapped back through their `sources`), or None where the update did not compute them:
    an episode left out of the update, a turn not wholly trained in its sample (`samples.turn_values`: cut
    at max context, a copied prefix turn), a sample the update kept none for. No log-probs (an update that
    kept none, SFT's): None everywhere."""
    out: list[list[list[float] | None]] = [[None] * len(episode.turns) for episode in episodes]
    if not logprobs:
        return out
    if not len(sources) == len(samples) == len(logprobs):
        raise ValueError(f"{len(sources)} sources, {len(samples)} samples and {len(logprobs)} log-prob rows")
    for source, sample, values in zip(sources, samples, logprobs, strict=True):
        if values is None:
            continue
        turns = [episodes[source.episode].turns[position] for position in source.turns]
        found = turn_values(values, sample, completion_spans(turns))
        for position, turn_logprobs in zip(source.turns, found, strict=True):
            out[source.episode][position] = turn_logprobs
    return out


# ---- 2. update and weights out -----------------------------------------------------------------------


class WeightsOut(Protocol):
    """Where the weights go around an update: `before` frees what the update needs, `after` makes the
    new weights (or, when nothing changed, the old ones) what the engine samples with; its metrics."""

    def before(self) -> None: ...

    async def after(self, learner: Learner, changed: bool) -> dict[str, float]: ...


@dataclass(frozen=True)
class IntoEngine:
    """Sync mode, a rank with an engine (rank 0; every rank with `trainer.dp_rollouts`): the engine
    releases its memory for the update and loads the new weights after; `every_rank` when every rank's
    engine receives them (all ranks must agree)."""

    engine: PolicyEngine
    every_rank: bool = False

    def before(self) -> None:
        self.engine.release_memory()

    async def after(self, learner: Learner, changed: bool) -> dict[str, float]:
        if not changed:
            self.engine.retake_memory()
            return {"sync_s": 0.0}
        return {"sync_s": publish_weights(self.engine, learner, self.every_rank)}


class GatherOnly:
    """Ranks without an engine: they take part in the collective gather of the new weights, nothing more."""

    def before(self) -> None:
        """No engine, no memory to release."""

    async def after(self, learner: Learner, changed: bool) -> dict[str, float]:
        if changed and learner.sharded:
            distributed.full_state_dict(learner.policy)  # collective: rank 0 keeps the result
        return {}


def publish_weights(engine: PolicyEngine, learner: Learner, every_rank: bool = False) -> float:
    """Seconds to make the engine sample with the learner's weights: nothing to copy when the learner
    trains the engine's own module (hf, cached; vLLM still pushes them into its own copy); the gathered
    shards with several ranks, or the async copy's weights, loaded into the engine's module otherwise.
    With several ranks this is collective: rank 0 calls it and the others `GatherOnly`, or, `every_rank`,
    every rank calls it with its own engine."""
    started = time.perf_counter()
    if learner.policy is engine.module:
        engine.load_weights(None)
    else:
        engine.load_weights(distributed.full_state_dict(learner.policy, every_rank))
    return time.perf_counter() - started


async def update_step(
    learner: Learner, samples: list[TrainSample] | None, weights_out: WeightsOut
) -> UpdateResult:
    """Phase 2 on every rank: rank 0's `samples` to all ranks (the others pass None), the update in a worker
    thread, then the weights out; with `update.return_free_memory` the allocator's free pages go back to the
    system after the engine's release and after the update. Returns the update's result, its metrics with
    `update_s` and the sync times."""
    started = time.perf_counter()
    shared = await distributed.off_loop(distributed.broadcast, samples, learner.parallel)
    returning = learner.config.update.return_free_memory
    with sub_phase("update_release"):
        weights_out.before()
        if returning:
            return_free_memory()
    update = await asyncio.to_thread(learner.update, shared)
    if returning:  # the activations and the gradients (`Learner.update` drops them) before the sync
        return_free_memory()
    update_s = time.perf_counter() - started
    with sub_phase("update_sync"):
        synced = await weights_out.after(learner, update.changed)
    timed = {**update.metrics, "update_s": update_s, **synced}
    return dataclasses.replace(update, metrics=timed)


# ---- 3. records and 4. checkpoints -------------------------------------------------------------------


def record_step(
    ctx: RunContext,
    step: int,
    episodes: Sequence[Episode],
    credited: Credited,
    update: UpdateResult | None = None,
) -> None:
    """Phase 3: every episode of the step into the store, the usable ones with their advantages and the
    trainer's log-probs of the turns the update computed them for (`trainer_turn_logprobs`), the
    infrastructure failures without (they are kept, never trained on)."""
    logprobs = update.logprobs if update is not None else ()
    trainer = trainer_turn_logprobs(credited.usable, credited.sources, credited.samples, logprobs)
    ctx.writer.record_episodes(
        ctx.run_id, step, "train", credited.usable, credited.advantages, trainer_logprobs=trainer
    )
    failed = [episode for episode in episodes if episode.is_infra_failure]
    ctx.writer.record_episodes(ctx.run_id, step, "train", failed, None)


def save_checkpoint_if_due(
    config: RunConfig,
    step: int,
    learner: Learner,
    run_dir: Path,
    run_id: str,
    flush: Callable[[], None],
    env_steps: int,
) -> None:
    """Phase 4 on every rank: a resumable checkpoint when `step` is a multiple of `trainer.checkpoint_every`.
    `flush` first makes the store hold the step before the checkpoint says it is done (rank 0; the
    others pass a no-op); rank 0 writes state.json (with its `env_steps` so far) and the rename, every
    rank its shards."""
    every = config.trainer.checkpoint_every
    if not every or step % every:
        return
    flush()
    state = checkpoint.CheckpointState(step=step, run_id=run_id, weights_version=step, env_steps=env_steps)
    checkpoint.save(
        run_dir, state, learner.policy, learner.optimizer, learner.scheduler, parallel=learner.parallel
    )


def nothing_to_flush() -> None:
    """The `flush` of ranks that hold no store."""
