"""One policy update: PPO epochs over mini batches, each accumulated from micro batches, then one step.

What this is: `ppo_update`, a short readable loop:
    for each PPO epoch, for each mini batch:
        for each micro batch: forward, per-token log-probs, loss scaled by the micro batch's share, backward
        clip gradients, optimiser step, scheduler step
The scaling makes the accumulated gradient exactly that of the mini-batch loss under the configured
aggregation (for token_mean: the mean over every sampled token of the mini batch). Also here: truncated
importance sampling (`with_tis_weights`), the sampler-mismatch metrics, and `loss_step`, the same step with
another loss (SFT's). `ppo_update_and_logprobs` is the same update that also hands back the trainer's
log-probs of the sampled tokens under the weights it started from (`UpdateResult`: every sample's with one
mini batch, the default, or with TIS; the run store keeps them per turn, beside the sampler's), taken from
the forward pass the loss already makes.

Data parallel (`parallel=DataParallel(rank, world_size)`, `parallel.py`; the model wrapped by FSDP2 in
`agentrl/trainer/distributed.py`): each rank trains on every world_size-th sample of each mini batch; the
normaliser is the global one (all-reduced) and each rank's loss is scaled by world_size because FSDP
averages gradients over ranks, so the update equals the single-process one. Every rank runs the same
number of forward/backward passes (FSDP's collectives need all ranks): a rank with fewer micro batches
runs zero-weighted fillers.

What this is not: the micro batches and their shared-prefix forward (`shared_prefix.py`), the optimiser
(`optim.py`), the losses (`losses.py`), or a launcher (torchrun starts the ranks). It does not reorder
samples: mini batches are contiguous slices in the caller's order (the micro batches inside one may be).
Log-probs are computed from logits divided by the sampling temperature (`temperature=`), the same
distribution the engine sampled from, so the PPO ratio starts at 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from agentrl.cpu import native_cpu_bf16
from agentrl.errors import ConfigError
from agentrl.trainer.configs import Aggregation, LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.fused_head import fused_head_where_supported
from agentrl.trainer.losses import LOG_RATIO_CLAMP, aggregation_weight, policy_loss
from agentrl.trainer.optim import clip_and_step
from agentrl.trainer.parallel import SINGLE_PROCESS, DataParallel
from agentrl.trainer.peak_memory import sub_phase
from agentrl.trainer.samples import Pack, TrainSample, collate, columns_start, to_sample_layout
from agentrl.trainer.shared_prefix import (
    collate_pack,
    local_packs,
    pack_logits,
    pack_token_logprobs,
    sharing_where_supported,
)

MicroBatchLoss = Callable[
    [torch.nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, float], dict[str, float]]
]
"""A micro batch's loss from the model and the collated batch: (loss, token-mean metrics, metrics
aggregated as the loss is); `ppo_update`'s is PPO's, `loss_step` takes another."""


@dataclasses.dataclass(frozen=True)
class UpdateResult:
    """What an update gives back: its `metrics` (`ppo_update`'s) and `logprobs`, per sample in the order
    given, the trainer's log-probs of its tokens ([L] float32 on the CPU, 0 where loss_mask is 0) under the
    weights the update started from, at the sampling temperature, or None for a sample whose log-probs the
    update did not compute before its first optimiser step (`ppo_update_and_logprobs`). Empty: none kept."""

    metrics: dict[str, float]
    logprobs: tuple[torch.Tensor | None, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the weights changed (an update with no samples returns no metrics)."""
        return bool(self.metrics)


def ppo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    samples: list[TrainSample],
    pad_id: int,
    loss_cfg: LossConfig,
    update_cfg: UpdateConfig,
    ref_model: torch.nn.Module | None = None,
    optim_cfg: OptimConfig | None = None,
    temperature: float = 1.0,
    parallel: DataParallel = SINGLE_PROCESS,
) -> dict[str, float]:
    """Train on `samples`; return means of loss, clip_frac, approx_kl, grad_norm, kl, entropy, and tokens,
    plus `sampler_abs_log_ratio`, `sampler_kl`, `sampler_weight_mean` and `ess` (the normalised effective
    sample size of the weights pi_trainer / pi_sampler, `effective_sample_size`) from the first mini batch of
    the first epoch (the weights before this update): the engine-vs-trainer mismatch, logged every step. With
    `loss_cfg.tis_cap` > 0 the samples first get truncated importance weights (`with_tis_weights`), and the
    mismatch, `tis_weight_mean` and `tis_capped_frac` come from that pass.

    `optim_cfg` only supplies `grad_clip` (default: OptimConfig's). `temperature` is the sampling temperature
    the episodes were generated at: logits are divided by it, as the engine's sampler did. The model is in
    train mode during the update and in eval mode after it, whatever happens.
    """
    return ppo_update_and_logprobs(
        model,
        optimizer,
        scheduler,
        samples,
        pad_id,
        loss_cfg,
        update_cfg,
        ref_model,
        optim_cfg,
        temperature,
        parallel,
        keep_logprobs=False,
    ).metrics


def ppo_update_and_logprobs(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    samples: list[TrainSample],
    pad_id: int,
    loss_cfg: LossConfig,
    update_cfg: UpdateConfig,
    ref_model: torch.nn.Module | None = None,
    optim_cfg: OptimConfig | None = None,
    temperature: float = 1.0,
    parallel: DataParallel = SINGLE_PROCESS,
    keep_logprobs: bool = True,
) -> UpdateResult:
    """`ppo_update`, keeping the trainer's log-probs of the samples' tokens under the weights it started
    from (the viewer's importance ratio against the sampler's), at no extra forward pass: the log-probs the
    first mini batch of the first epoch computes for its loss (before the first optimiser step), or with
    `loss_cfg.tis_cap` > 0 those of `with_tis_weights`' pass (every sample). Samples in later mini batches
    (`update.mini_batches` > 1, no TIS) get None: their first forward comes after an optimiser step. With
    several ranks each rank computes its own samples' and every rank gets all of them (one all-gather).
    `keep_logprobs=False` (what `ppo_update` passes) keeps none."""
    if loss_cfg.kl_coef > 0 and ref_model is None:
        raise ConfigError("loss.kl_coef > 0 needs a reference model; pass ref_model or set kl_coef to 0")
    grad_clip = (optim_cfg or OptimConfig()).grad_clip
    update_cfg = where_supported(update_cfg, model, ref_model, parallel)
    tally = _Tally()
    kept: dict[int, torch.Tensor] = {}
    if loss_cfg.tis_cap > 0:
        if parallel.world_size > 1:
            raise ConfigError("loss.tis_cap > 0 is single-process for now; use trainer.nproc=1 or tis_cap=0")
        with sub_phase("update_old_logprobs"):
            samples, tis_metrics = with_tis_weights(model, samples, pad_id, loss_cfg, update_cfg, temperature)
        tally.add(tis_metrics)
        # its old log-probs are the trainer's own now, under the weights the update starts from
        kept = {index: sample.old_logprobs for index, sample in enumerate(samples)} if keep_logprobs else {}
    model.train()
    try:
        for epoch in range(update_cfg.ppo_epochs):
            for index, mini_batch in enumerate(_split(samples, update_cfg.mini_batches)):
                first = not epoch and not index  # the weights are still those the update started from
                step_metrics, logprobs = _mini_batch_step(
                    model,
                    optimizer,
                    mini_batch,
                    pad_id,
                    loss_cfg,
                    update_cfg,
                    ref_model,
                    temperature,
                    parallel,
                    keep_logprobs=keep_logprobs and first and loss_cfg.tis_cap <= 0,
                )
                kept.update(logprobs)  # the first mini batch starts at sample 0: its indices are the samples'
                # after the first mini batch the weights have moved; with TIS it was measured before the loop
                if not first or loss_cfg.tis_cap > 0:
                    step_metrics = {k: v for k, v in step_metrics.items() if not k.startswith("sampler_")}
                tally.add(step_metrics)
                tally.add({"grad_norm": clip_and_step(model, optimizer, scheduler, grad_clip)}, weight=1.0)
    finally:
        model.eval()
    means = tally.means()
    if "sampler_weight_sq_mean" in means:
        second_moment = means.pop("sampler_weight_sq_mean")
        means["ess"] = effective_sample_size(means["sampler_weight_mean"], second_moment)
    metrics = {**means, "tokens": float(sum(sample.num_sampled_tokens for sample in samples))}
    per_sample = tuple(kept.get(index) for index in range(len(samples))) if keep_logprobs else ()
    return UpdateResult(metrics, per_sample)


@torch.no_grad()
def with_tis_weights(
    model: torch.nn.Module,
    samples: Sequence[TrainSample],
    pad_id: int,
    loss_cfg: LossConfig,
    update_cfg: UpdateConfig,
    temperature: float,
) -> tuple[list[TrainSample], dict[str, float]]:
    """Truncated importance sampling, folded into the samples: `old_logprobs` become the trainer's own
    log-probs under the sampling weights (one no-grad pass), and each sampled token's advantage is scaled by
    w = min(exp(trainer - sampler), tis_cap). Since w >= 0, PPO's min(r A, clip(r) A) times w equals the same
    expression with w A, so the loss itself is unchanged. Also returns the mismatch metrics of that pass,
    the mean weight and the share of tokens at the cap."""
    model.eval()
    update_cfg = where_supported(update_cfg, model, None, SINGLE_PROCESS)
    out = list(samples)
    tally = _Tally()
    device = model_device(model)
    for pack in local_packs(samples, update_cfg, SINGLE_PROCESS):
        collated = collate_pack(samples, pack, pad_id)  # on the CPU, where `trainer` is brought
        batch = to_device(collated, device)
        with _autocast(update_cfg.autocast_bf16):
            logits = pack_logits(model, batch, update_cfg.fused_head)
        trainer = pack_token_logprobs(logits, batch, temperature)[0].cpu()
        mask = collated["loss_mask"]
        log_ratio = (trainer - collated["old_logprobs"]).clamp(max=LOG_RATIO_CLAMP)
        weights = torch.exp(log_ratio).clamp(max=loss_cfg.tis_cap)
        tokens = float(mask.sum().item())
        capped = float(((weights >= loss_cfg.tis_cap).float() * mask).sum().item())
        tally.add(sampler_mismatch(trainer, collated["old_logprobs"], mask), weight=tokens)
        tally.add(
            {
                "tis_weight_mean": float(((weights * mask).sum() / mask.sum().clamp(min=1.0)).item()),
                "tis_capped_frac": capped / max(tokens, 1.0),
            },
            weight=tokens,
        )
        weights = weights.cpu()
        start = columns_start(collated)
        for row, index in enumerate(pack.indices):
            sample = samples[index]
            row_weights = to_sample_layout(weights[row], sample, start)
            out[index] = dataclasses.replace(
                sample,
                old_logprobs=to_sample_layout(trainer[row], sample, start) * sample.loss_mask,
                advantages=sample.advantages * row_weights * sample.loss_mask,
            )
    return out, tally.means()


def _mini_batch_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    mini_batch: Sequence[TrainSample],
    pad_id: int,
    loss_cfg: LossConfig,
    update_cfg: UpdateConfig,
    ref_model: torch.nn.Module | None,
    temperature: float,
    parallel: DataParallel,
    micro_loss: MicroBatchLoss | None = None,
    keep_logprobs: bool = False,
) -> tuple[dict[str, float], dict[int, torch.Tensor]]:
    """Accumulate the mini batch's gradient over micro batches; return its token-weighted metrics and, with
    `keep_logprobs` (PPO's loss only), the log-probs its forward passes computed, by index into
    `mini_batch`, in each sample's layout (`sample_logprobs`), gathered from every rank. The loss of a micro
    batch is PPO's (`_micro_batch_loss`) unless `micro_loss` gives another (SFT's NLL)."""
    optimizer.zero_grad(set_to_none=True)
    device = model_device(model)
    packs = local_packs(mini_batch, update_cfg, parallel)
    chunks = [to_device(collate_pack(mini_batch, pack, pad_id), device) for pack in packs]
    weights = [aggregation_weight(batch["loss_mask"], loss_cfg.aggregation) for batch in chunks]
    total = parallel.sum(float(sum(weights))) or 1.0
    passes = int(parallel.max(float(len(chunks))))
    filler = to_device(collate(mini_batch[:1], pad_id), device)
    tally = _Tally()
    kept: dict[int, torch.Tensor] = {}
    for index in range(passes):
        batch, weight = (chunks[index], weights[index]) if index < len(chunks) else (filler, 0.0)
        with sub_phase("update_forward"):
            if micro_loss is None:
                loss, metrics, aggregated, logprobs = _micro_batch_loss(
                    model, batch, loss_cfg, update_cfg, ref_model, temperature
                )
                if keep_logprobs and index < len(packs):  # fillers hold no sample of this rank
                    kept.update(sample_logprobs(logprobs.detach(), batch, packs[index], mini_batch))
            else:
                loss, metrics, aggregated = micro_loss(model, batch)
        with sub_phase("update_backward"):
            (loss * (weight * parallel.world_size / total)).backward()
        if weight:
            # token means weigh by tokens, aggregated terms by their aggregation weight: either way the
            # means over micro batches are the mini batch's, however its samples were split
            tally.add(metrics, weight=float(batch["loss_mask"].sum().item()))
            tally.add({**aggregated, "loss": float(loss.item())}, weight=weight)
    if keep_logprobs:  # every rank computed its own samples'
        kept = {index: values for rank in parallel.gather(kept) for index, values in rank.items()}
    return _Tally.merge(parallel.gather(tally)).means(), kept


def sample_logprobs(
    logprobs: torch.Tensor, batch: dict[str, torch.Tensor], pack: Pack, samples: Sequence[TrainSample]
) -> dict[int, torch.Tensor]:
    """A micro batch's [B, T] log-probs at its loss columns (`pack_token_logprobs`) -> by index into
    `samples`, each member's [L] log-probs at its own positions (float32 on the CPU), 0 where its loss mask
    is 0: there a shared-prefix pack's row holds another member's values or none (`samples.shared_length`)."""
    rows = logprobs.float().cpu()
    start = columns_start(batch)
    return {
        index: to_sample_layout(rows[row], samples[index], start) * samples[index].loss_mask
        for row, index in enumerate(pack.indices)
    }


def loss_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    samples: list[TrainSample],
    pad_id: int,
    update_cfg: UpdateConfig,
    micro_loss: MicroBatchLoss,
    aggregation: Aggregation = "token_mean",
    grad_clip: float = 1.0,
    parallel: DataParallel = SINGLE_PROCESS,
) -> dict[str, float]:
    """One optimiser step over `samples` with another loss than PPO's (`agentrl/trainer/sft_update.py`'s
    NLL): the same micro batches and shared-prefix packs, data-parallel scaling and fillers, aggregation
    weights, clipping, schedule step and metrics as one mini batch of `ppo_update`. The model is in train
    mode during the step and in eval mode after it."""
    update_cfg = where_supported(update_cfg, model, None, parallel)
    loss_cfg = LossConfig(aggregation=aggregation)
    model.train()
    try:
        metrics, _ = _mini_batch_step(
            model, optimizer, samples, pad_id, loss_cfg, update_cfg, None, 1.0, parallel, micro_loss
        )
        grad_norm = clip_and_step(model, optimizer, scheduler, grad_clip)
    finally:
        model.eval()
    tokens = float(sum(sample.num_sampled_tokens for sample in samples))
    return {**metrics, "grad_norm": grad_norm, "tokens": tokens}


def where_supported(
    update_cfg: UpdateConfig,
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    parallel: DataParallel,
) -> UpdateConfig:
    """`update_cfg` with each speed-up the models or the ranks cannot run turned off, saying why once: the
    shared-prefix forward (`sharing_where_supported`) and the fused head (`fused_head_where_supported`)."""
    update_cfg = sharing_where_supported(update_cfg, model, ref_model, parallel)
    return fused_head_where_supported(update_cfg, (model, ref_model), parallel.world_size)


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters live (FSDP2 shards: the local device); batches are moved there."""
    return next(model.parameters()).device


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The collated batch on `device` (a no-op on CPU)."""
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def _micro_batch_loss(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    loss_cfg: LossConfig,
    update_cfg: UpdateConfig,
    ref_model: torch.nn.Module | None,
    temperature: float,
) -> tuple[torch.Tensor, dict[str, float], dict[str, float], torch.Tensor]:
    """The micro batch's loss, its token-mean metrics, its aggregated ones (kl, and entropy when it is the
    bonus: `aggregate`d as the loss is), and its log-probs at the loss columns ([B, T], with their graph)."""
    with _autocast(update_cfg.autocast_bf16):
        logits = pack_logits(model, batch, update_cfg.fused_head)
        ref_logprobs = None
        if ref_model is not None:
            with sub_phase("update_reference"):
                ref_logprobs = _reference_logprobs(ref_model, batch, temperature, update_cfg.fused_head)
    mask = batch["loss_mask"]
    # chunked: no fp32 copy of the [B, L, vocab] logits; the entropies carry a gradient only for the bonus
    new_logprobs, entropy = pack_token_logprobs(logits, batch, temperature)
    bonus = entropy if loss_cfg.entropy_coef > 0 else None
    loss, metrics = policy_loss(
        new_logprobs,
        batch["old_logprobs"],
        batch["advantages"],
        mask,
        loss_cfg,
        ref_logprobs=ref_logprobs,
        entropy=bonus,
    )
    if bonus is None:  # reported over sampled positions only
        metrics["entropy"] = float(((entropy.detach() * mask).sum() / mask.sum().clamp(min=1.0)).item())
    metrics.update(sampler_mismatch(new_logprobs.detach(), batch["old_logprobs"], mask))
    aggregated = {"kl": metrics.pop("kl")} if "kl" in metrics else {}
    if bonus is not None:
        aggregated["entropy"] = metrics.pop("entropy")
    return loss, metrics, aggregated, new_logprobs


def sampler_mismatch(
    logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's log-probs of the sampled tokens are from the sampler's: the mean |log ratio|,
    the k3 estimate of KL(sampler || trainer), and the first two moments of the importance weights
    w = pi_trainer / pi_sampler, all over sampled tokens. For the same weights, bf16 kernels, batching and
    attention code make them differ; in async mode the trainer's weights are also newer than the sampler's.
    Large values call for importance correction. The moments are token means, so means over micro batches
    weighted by their token counts are the moments of the whole batch (`effective_sample_size` needs that).
    """
    log_ratio = (logprobs - sampler_logprobs) * mask
    count = mask.sum().clamp(min=1.0)
    k3 = (torch.exp(log_ratio) - log_ratio - 1.0) * mask
    weights = torch.exp(log_ratio.clamp(max=LOG_RATIO_CLAMP)) * mask
    return {
        "sampler_abs_log_ratio": float((log_ratio.abs().sum() / count).item()),
        "sampler_kl": float((k3.sum() / count).item()),
        "sampler_weight_mean": float((weights.sum() / count).item()),
        "sampler_weight_sq_mean": float((weights.square().sum() / count).item()),
    }


def effective_sample_size(weight_mean: float, weight_sq_mean: float) -> float:
    """Normalised effective sample size of n importance weights, (sum w)^2 / (n sum w^2), written with their
    token means as mean(w)^2 / mean(w^2): in (0, 1], 1 when every weight is equal (on-policy, no mismatch),
    1/n when one token carries all the weight. 1 for an empty batch."""
    return weight_mean**2 / weight_sq_mean if weight_sq_mean > 0 else 1.0


@torch.no_grad()
def _reference_logprobs(
    ref_model: torch.nn.Module, batch: dict[str, torch.Tensor], temperature: float, fused_head: bool
) -> torch.Tensor:
    return pack_token_logprobs(pack_logits(ref_model, batch, fused_head), batch, temperature)[0]


def _autocast(enabled: bool) -> AbstractContextManager[Any]:
    """CPU bf16 autocast when asked for and the CPU has native bf16 (emulated bf16 is far slower)."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if enabled and native_cpu_bf16() else nullcontext()


def _split(samples: Sequence[TrainSample], parts: int) -> Iterator[Sequence[TrainSample]]:
    """`parts` contiguous slices of near-equal size; empty slices are skipped."""
    size, extra = divmod(len(samples), parts)
    start = 0
    for index in range(parts):
        stop = start + size + (1 if index < extra else 0)
        if stop > start:
            yield samples[start:stop]
        start = stop


class _Tally:
    """Weighted running means of named floats."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, values: dict[str, float], weight: float = 1.0) -> None:
        for name, value in values.items():
            self.sums[name] = self.sums.get(name, 0.0) + value * weight
            self.weights[name] = self.weights.get(name, 0.0) + weight

    @staticmethod
    def merge(tallies: Sequence[_Tally]) -> _Tally:
        """One tally of several (e.g. one per rank)."""
        out = _Tally()
        for tally in tallies:
            for name, total in tally.sums.items():
                out.sums[name] = out.sums.get(name, 0.0) + total
                out.weights[name] = out.weights.get(name, 0.0) + tally.weights[name]
        return out

    def means(self) -> dict[str, float]:
        return {
            name: self.sums[name] / self.weights[name] if self.weights[name] else 0.0 for name in self.sums
        }
