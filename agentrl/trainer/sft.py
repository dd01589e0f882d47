"""`sft(config)`: supervised fine-tuning on demonstrations (`agentrl sft`), the cold start before RL.

What this is: the SFT run, built from the trainer's own parts: `open_run` (store row, run folder, env
service, engine, W&B), `evaluate` on the held-out split before and after, `make_learner` (model loading, LoRA,
FSDP2-sharded copies with `trainer.nproc` > 1), `update_step` (rank 0's samples broadcast, the update in a
worker thread), `save_checkpoint_if_due`, `log_metrics`. What differs from RL is only the data and the loss:
the demonstrations `agentrl demos` wrote (`sft.demos`), checked against this run (`demos.check_demos`: same
env and tokenizer, no held-out task), laid out by `sft_update.sft_sample` (the `concat` sample RL trains on,
loss on the assistant tokens only), `sft.epochs` seeded passes of `sft.batch_size` demonstrations per
optimiser step, and the NLL loss (`sft_update.sft_update`, through `update.loss_step`). The learning rate is
`sft.lr`; KL, entropy and importance terms are off.

The engine samples only in the two evaluations, so the trained weights go into it once, after the last step
(not after every step as in RL). Output: runs/<name>/final, a model folder `agentrl train model.name=...`
loads (with LoRA the adapters are merged into the base weights first, so it is a plain model too).

What this is not: resumable (`trainer.resume` is refused; SFT runs are minutes long) or asynchronous.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.config import RunConfig
from agentrl.demos import check_demos, load_demos
from agentrl.errors import ConfigError
from agentrl.models import has_adapters, load_tokenizer
from agentrl.trainer import distributed
from agentrl.trainer.run import (
    EvalResult,
    RunContext,
    console,
    evaluate,
    log_metrics,
    open_run,
    pad_id,
    save_final_weights,
)
from agentrl.trainer.samples import TrainSample
from agentrl.trainer.sft_update import sft_sample, sft_schedule, sft_update
from agentrl.trainer.step import (
    Learner,
    make_learner,
    nothing_to_flush,
    publish_weights,
    save_checkpoint_if_due,
    update_step,
)
from agentrl.trainer.update import DataParallel

SFTResult = tuple[EvalResult | None, EvalResult | None, str]
"""(held-out before, held-out after, run directory) on rank 0; (None, None, "") on the other ranks."""


@dataclass
class SFTLearner(Learner):
    """A `Learner` whose update is one SFT optimiser step (NLL on the demonstrated tokens) instead of PPO."""

    def update(self, samples: Any) -> dict[str, float]:
        if not samples:
            return {}
        config = self.config
        return sft_update(
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
    """Run SFT as this process's rank asks: rank 0 (or the only process) evaluates and trains, the other
    ranks train their share of rank 0's samples."""
    config = sft_run_config(config)
    parallel = distributed.init_from_env()
    try:
        if parallel.rank != 0:
            await sft_other_rank(config, parallel)
            return None, None, ""
        return await sft_rank_zero(config, parallel)
    finally:
        distributed.close(parallel)


async def sft_rank_zero(config: RunConfig, parallel: DataParallel) -> SFTResult:
    """Held-out evaluation, the SFT steps, the weights into the engine, evaluation again, the final model."""
    assert config.sft.demos is not None
    demos = load_demos(config.sft.demos)
    check_demos(demos, config, load_tokenizer(config.model))  # before anything is opened or recorded
    async with open_run(config, kind="sft") as ctx:
        samples = [sft_sample(episode, config.rollout.max_context_tokens) for episode in demos.episodes]
        samples = [sample for sample in samples if sample.num_sampled_tokens]
        schedule = sft_schedule(len(samples), config.sft.epochs, config.sft.batch_size, config.train.seed)
        tokens = sum(sample.num_sampled_tokens for sample in samples)
        console.print(
            f"SFT on {len(samples)} demonstrations from {demos.path} ({tokens} demonstrated tokens): "
            f"{len(schedule)} steps"
        )
        before = await evaluate(ctx, step=0) if config.eval.before else None
        learner = make_sft_learner(config, parallel, ctx.engine.module, pad_id(ctx.engine.tokenizer))
        distributed.broadcast((str(ctx.run_dir), len(schedule)), parallel)
        ctx.engine.release_memory()
        per_epoch = -(-len(samples) // config.sft.batch_size)
        for step, indices in enumerate(schedule, 1):
            batch: list[TrainSample] = [samples[index] for index in indices]
            update = await update_step(learner, batch, AfterTheLastStep())
            extra = {"epoch": float((step - 1) // per_epoch + 1), "episodes": float(len(batch))}
            log_metrics(ctx, step, {**update, **extra, "lr": learner.scheduler.get_last_lr()[0]})
            save_checkpoint_if_due(config, step, learner, ctx.run_dir, ctx.run_id, ctx.writer.flush)
        log_metrics(ctx, len(schedule), {"sync_s": publish_weights(ctx.engine, learner)})
        after = await evaluate(ctx, step=len(schedule)) if config.eval.after else None
        save_sft_weights(ctx)
        return before, after, str(ctx.run_dir)


async def sft_other_rank(config: RunConfig, parallel: DataParallel) -> None:
    """Ranks > 0: the same steps on their share of rank 0's samples, then the collective gather."""
    learner = make_sft_learner(config, parallel, None, pad_id(load_tokenizer(config.model)))
    run_dir, steps = distributed.broadcast(None, parallel)
    for step in range(1, steps + 1):
        await update_step(learner, None, AfterTheLastStep())
        save_checkpoint_if_due(config, step, learner, Path(run_dir), "", nothing_to_flush)
    distributed.full_state_dict(learner.policy)  # collective: rank 0 loads the result into its engine


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
