"""`sft(config)`: supervised fine-tuning on demonstrations (`agentrl sft`), the cold start before RL.

What this is: the SFT run, built from the trainer's own parts: the one training loop
(`agentrl/trainer/loop.py`) with SFT's seats (`SFTSeat` on rank 0, `loop.FollowerSeat` on the others),
`open_run` (store row, run folder, env service, engine, W&B), `evaluate` on the held-out split before and
after, `make_learner` (model loading, LoRA, FSDP2-sharded copies with `trainer.nproc` > 1), `update_step`
(rank 0's samples broadcast, the update in a worker thread), `save_checkpoint_if_due`, `log_metrics`. What
differs from RL is only the data and the loss: the demonstrations `agentrl demos` wrote (`sft.demos`),
checked against this run (`demos.check_demos`: same env and tokenizer, no held-out task), laid out by
`sft_update.sft_samples` (the `concat` samples RL trains on, loss on the assistant tokens only), `sft.epochs`
seeded passes of `sft.batch_size` demonstrations per optimiser step, and the NLL loss
(`sft_update.sft_update`, through `update.loss_step`). The learning rate is
`sft.lr`; KL, entropy and importance terms are off.

The engine samples only in the two evaluations, so the trained weights go into it once, after the last step
(not after every step as in RL). Output: runs/<name>/final, a model folder `agentrl train model.name=...`
loads (with LoRA the adapters are merged into the base weights first, so it is a plain model too).

What this is not: resumable (`trainer.resume` is refused; SFT runs are minutes long), asynchronous, or
bounded by env steps (`train.env_step_budget` is refused: SFT plays none).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.config import RunConfig
from agentrl.demos import Demos, check_demos, load_demos
from agentrl.errors import ConfigError
from agentrl.models import has_adapters, load_tokenizer
from agentrl.trainer import distributed
from agentrl.trainer.loop import Collected, FollowerSeat, LoopResult, Plan, RunOwner, run_loop
from agentrl.trainer.parallel import DataParallel
from agentrl.trainer.run import (
    RunContext,
    console,
    log_metrics,
    open_run,
    pad_id,
    save_final_weights,
)
from agentrl.trainer.sft_update import sft_samples, sft_schedule, sft_update
from agentrl.trainer.step import Learner, WeightsOut, make_learner, publish_weights
from agentrl.trainer.update import UpdateResult

SFTResult = LoopResult


@dataclass
class SFTLearner(Learner):
    """A `Learner` whose update is one SFT optimiser step (NLL on the demonstrated tokens) instead of PPO."""

    def update(self, samples: Any) -> UpdateResult:
        if not samples:
            return UpdateResult({})
        config = self.config
        metrics = sft_update(
            self.policy,
            self.optimizer,
            self.scheduler,
            list(samples),
            self.pad_id,
            config.update,
            config.optim,
            aggregation=config.sft.aggregation,
            parallel=self.parallel,
        )
        return UpdateResult(metrics)  # no trainer log-probs: no sampler to compare them with


class AfterTheLastStep:
    """SFT's `WeightsOut`: nothing per step (the engine samples only in the evaluations); `sft` puts the
    weights into the engine once, after the last step."""

    def before(self) -> None:
        """The engine's memory is released once, before the first step."""

    async def after(self, learner: Learner, changed: bool) -> dict[str, float]:
        return {}


def sft_run_config(config: RunConfig) -> RunConfig:
    """The config the SFT run trains with (and saves): `optim.lr` = `sft.lr`, no KL, entropy or importance
    terms (they belong to the RL loss). The two evaluations are played on rank 0 alone."""
    if config.trainer.resume is not None:
        raise ConfigError("agentrl sft is not resumable; drop trainer.resume (SFT runs are short)")
    if config.trainer.async_mode:
        raise ConfigError("agentrl sft has no async mode; drop trainer.async_mode")
    if config.train.env_step_budget:
        raise ConfigError(
            "agentrl sft plays no env steps (it trains on recorded demonstrations), so it has no env-step "
            "budget; drop train.env_step_budget (sft.epochs sets how long SFT trains)"
        )
    if config.engine.kind == "openai":
        raise ConfigError("engine.kind=openai holds no weights to fine-tune; use auto, cached, hf or vllm")
    if not config.sft.demos:
        raise ConfigError(
            "say which demonstrations to train on: --demos runs/<name>/demos.jsonl (agentrl demos)"
        )
    return dataclasses.replace(
        config,
        optim=dataclasses.replace(config.optim, lr=config.sft.lr),
        loss=dataclasses.replace(config.loss, kl_coef=0.0, entropy_coef=0.0, tis_cap=0.0),
    )


def make_sft_learner(config: RunConfig, parallel: DataParallel, trained: Any, pad_token: int) -> SFTLearner:
    """`make_learner`'s learner (the same model, LoRA and FSDP2 handling), updating with SFT's loss."""
    base = make_learner(config, parallel, trained, pad_token)
    return SFTLearner(**{item.name: getattr(base, item.name) for item in dataclasses.fields(base)})


async def sft(config: RunConfig) -> SFTResult:
    """Run SFT as this process's rank asks, in the one training loop (`agentrl/trainer/loop.py`): rank 0
    (or the only process) evaluates and trains, the other ranks train their share of rank 0's samples."""
    config = sft_run_config(config)
    parallel = distributed.init_from_env()
    try:
        if parallel.rank != 0:
            learner = lambda: make_sft_learner(config, parallel, None, pad_id(load_tokenizer(config.model)))  # noqa: E731
            seat = FollowerSeat(config, parallel, learner, AfterTheLastStep(), gather_at_end=True)
            return await run_loop(config, seat, None)
        assert config.sft.demos is not None
        demos = load_demos(config.sft.demos)
        check_demos(demos, config, load_tokenizer(config.model))  # before anything is opened or recorded
        async with open_run(config, kind="sft") as ctx:
            return await run_loop(config, SFTSeat(ctx, parallel, demos), None)
    finally:
        distributed.close(parallel)


@dataclass
class SFTSeat(RunOwner):
    """Rank 0 of an SFT run in `loop.run_loop`: evaluation, `sft.epochs` seeded passes over the
    demonstrations in batches of `sft.batch_size`, the weights into the engine once, evaluation again."""

    demos: Demos
    weights_out: WeightsOut = field(default_factory=AfterTheLastStep)

    def __post_init__(self) -> None:
        config = self.ctx.config
        laid_out = [s for e in self.demos.episodes for s in sft_samples(e, config.rollout.max_context_tokens)]
        self.samples = [sample for sample in laid_out if sample.num_sampled_tokens]
        self.schedule = sft_schedule(
            len(self.samples), config.sft.epochs, config.sft.batch_size, config.train.seed
        )
        self.per_epoch = -(-len(self.samples) // config.sft.batch_size)
        tokens = sum(sample.num_sampled_tokens for sample in self.samples)
        console.print(
            f"SFT on {len(self.samples)} demonstrations from {self.demos.path} "
            f"({tokens} demonstrated tokens): {len(self.schedule)} steps"
        )
        self.learner: Learner | None = None

    def make_learner(self) -> Learner:
        engine = self.ctx.engine
        self.learner = make_sft_learner(
            self.ctx.config, self.parallel, engine.module, pad_id(engine.tokenizer)
        )
        return self.learner

    def restored(self, learner: Learner) -> None:
        raise AssertionError("SFT runs are not resumable (sft_run_config refuses trainer.resume)")

    def plan(self, first_step: int) -> Plan:
        self.ctx.engine.release_memory()  # the engine samples again only after the last step
        return Plan(str(self.ctx.run_dir), first_step, len(self.schedule))

    async def collect(self, step: int) -> Collected:
        return Collected([self.samples[index] for index in self.schedule[step - 1]])

    def record(self, step: int, collected: Collected | None, update: UpdateResult) -> None:
        assert collected is not None and self.learner is not None
        extra = {"epoch": float((step - 1) // self.per_epoch + 1), "episodes": float(len(collected.samples))}
        lr = self.learner.scheduler.get_last_lr()[0]
        log_metrics(self.ctx, step, {**update.metrics, **extra, "lr": lr})

    async def finish_training(self, learner: Learner, last_step: int) -> None:
        log_metrics(self.ctx, last_step, {"sync_s": publish_weights(self.ctx.engine, learner)})

    def close(self) -> str:
        save_sft_weights(self.ctx)
        return str(self.ctx.run_dir)


def save_sft_weights(ctx: RunContext) -> Path:
    """runs/<run>/final as a plain model folder: with LoRA the adapters are merged into the base weights
    first, so `model.name=<this path>` loads the fine-tuned model whatever `model.lora` says."""
    module = ctx.engine.module
    if module is None or not has_adapters(module):
        return save_final_weights(ctx)
    merged = module.merge_and_unload()  # type: ignore[operator]
    path = ctx.run_dir / "final"
    merged.save_pretrained(path)
    ctx.engine.tokenizer.save_pretrained(path)
    console.print(f"saved the fine-tuned weights (LoRA merged) to {path}")
    return path
