"""Policy-gradient losses in pure torch: token log-probs, the PPO clipped surrogate, k3 KL, aggregation.

What this is: small functions on [B, L] tensors, tested against hand-computed values. No model, no
optimiser, no batching; `update.py` owns the loop, and `LossConfig` lives in `configs.py` (no torch).

Alignment: position t holds quantities about token t. `token_logprobs(logits, ids)[:, t]` is
log p(ids[t] | ids[<t]), read from `logits[:, t - 1]`; position 0 has no prediction and holds 0. Samples
(`samples.py`) put the sampler's log-probs and the loss mask at the same positions, so every [B, L] tensor
here lines up without shifting.

What this is not: a reference-model manager or a value loss (there is no critic).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from agentrl.errors import ConfigError
from agentrl.trainer.configs import AGGREGATIONS, Aggregation, LossConfig

LOG_RATIO_CLAMP = 20.0  # keeps exp() finite when a token's probability collapsed
KL_CLAMP = 10.0  # verl's low-variance KL clamp: one bad token cannot dominate the batch


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """[B, L, V], [B, L] -> [B, L]: log-prob of each token given the ones before it; 0 at position 0."""
    predicting = logits[:, :-1].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = predicting.gather(-1, targets).squeeze(-1) - torch.logsumexp(predicting, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)


LOGPROB_CHUNK_ROWS = 128  # positions per chunk: [128, vocab] fp32 is 25 MB at a 49k vocab


def sampled_token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L, V] raw logits (any float dtype), [B, L] ids -> ([B, L] log-probs, [B, L] entropies), aligned as
    `token_logprobs` and `token_entropy` of the fp32 logits / temperature (0 at position 0).

    The same numbers as those two functions (to float32 rounding), computed a few rows at a time: neither the
    fp32 copy of the [B, L, vocab] logits nor its softmax is ever materialised, and the backward pass writes
    the logits' gradient in one sweep. That is most of the memory traffic of a small model's update
    (SmolLM2-135M: a 49k vocabulary over 576 hidden units). Both outputs carry a gradient (the entropies
    for an entropy bonus); when the entropies are only reported, their part of the backward pass is skipped.
    """
    logprobs, entropy = _SampledLogprobs.apply(logits, input_ids, temperature)
    return logprobs, entropy


class _SampledLogprobs(torch.autograd.Function):
    """Chunked log_softmax at the sampled ids, and entropy, of z = logits / temperature; p = softmax(z):
        d/dz (z_t - logsumexp(z)) = onehot(t) - p
        d/dz H = d/dz (logsumexp(z) - sum_i p_i z_i) = -p * (z - E_p[z]),  with E_p[z] = logsumexp(z) - H.

    The forward pass takes torch.logsumexp's own steps (max, exp of the shifted scores, sum, log, add back),
    so its results are torch's bit for bit, and reuses their exponentials for the entropy; the backward
    pass recomputes each chunk's softmax. Every op is one sweep over a cache-sized chunk."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, input_ids: torch.Tensor, temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = logits.shape
        logprobs = logits.new_zeros((batch, length), dtype=torch.float32)
        entropy = logits.new_zeros((batch, length), dtype=torch.float32)
        lse = logits.new_zeros((batch, length), dtype=torch.float32)
        for row, start, stop in row_chunks(batch, length):
            scores = scaled_logits(logits[row, start - 1 : stop - 1], temperature)
            stats = chunk_statistics(scores, input_ids[row, start:stop])
            logprobs[row, start:stop], entropy[row, start:stop], lse[row, start:stop] = stats
        ctx.save_for_backward(logits, input_ids, lse, lse - entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an output nobody differentiates gets None, and no work
        return logprobs, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None]:
        logits, input_ids, lse, expected_score = ctx.saved_tensors
        if grad_logprobs is None and grad_entropy is None:
            return None, None, None
        divisor = max(ctx.temperature, 1e-6) if ctx.temperature != 1.0 else None
        batch, length, _ = logits.shape
        grad = torch.zeros_like(logits)
        for row, start, stop in row_chunks(batch, length):
            chunk = logits[row, start - 1 : stop - 1].to(torch.float32, copy=True)
            upstreams = (grad_logprobs, grad_entropy)
            grad[row, start - 1 : stop - 1] = chunk_gradient(
                chunk, divisor, (row, start, stop), input_ids, lse, expected_score, upstreams
            )
        return grad, None, None


def chunk_statistics(
    scores: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[n, V] fp32 scaled scores, [n] sampled ids -> their ([n] log-probs, [n] entropies, [n] logsumexps),
    in torch.logsumexp's own steps (max, exp of the shifted scores, sum, log, add back)."""
    shift = scores.amax(dim=-1, keepdim=True)
    shift.masked_fill_(shift.abs() == float("inf"), 0.0)
    weights = (scores - shift).exp_()  # softmax * total
    total = weights.sum(-1)
    lse = total.log().add_(shift.squeeze(-1))
    picked = scores.gather(-1, ids[:, None]).squeeze(-1)
    expected_score = torch.bmm(weights.unsqueeze(1), scores.unsqueeze(2)).view(-1) / total
    return picked - lse, lse - expected_score, lse


def chunk_gradient(
    chunk: torch.Tensor,
    divisor: float | None,
    where: tuple[int, int, int],
    input_ids: torch.Tensor,
    lse: torch.Tensor,
    expected_score: torch.Tensor,
    upstreams: tuple[torch.Tensor | None, torch.Tensor | None],
) -> torch.Tensor:
    """The gradient at one chunk's raw logits, written into `chunk` (an fp32 copy of them, [n, V]) and
    returned: positions `where` = (row, start, stop), the forward pass's saved logsumexps and E_p[z], and
    the incoming gradients of the log-probs and the entropies (either may be None)."""
    row, start, stop = where
    grad_logprobs, grad_entropy = upstreams
    if divisor is not None:
        chunk.div_(divisor)
    upstream = _upstream(grad_logprobs, lse, row, start, stop)
    if grad_entropy is None:  # logsumexp's backward (-g * p) plus the gather's (g at the sampled id)
        chunk.sub_(lse[row, start:stop, None]).exp_().mul_(-upstream)
    else:  # -p * (g + g_H * (z - E_p[z])), the same plus the entropy's
        probs = (chunk - lse[row, start:stop, None]).exp_()
        chunk.sub_(expected_score[row, start:stop, None])
        chunk.mul_(_upstream(grad_entropy, lse, row, start, stop)).add_(upstream).mul_(probs).neg_()
    chunk.scatter_add_(-1, input_ids[row, start:stop, None], upstream)
    if divisor is not None:
        chunk.div_(divisor)
    return chunk


def _upstream(grad: torch.Tensor | None, like: torch.Tensor, row: int, start: int, stop: int) -> torch.Tensor:
    """The incoming gradient of positions start..stop of `row` as an fp32 column ([n, 1]); zeros (on the
    device of `like`) when None."""
    if grad is None:
        return like.new_zeros((stop - start, 1), dtype=torch.float32)
    return grad[row, start:stop, None].float()


def row_chunks(batch: int, length: int) -> Iterator[tuple[int, int, int]]:
    """(row, start, stop) over positions 1..length-1 of each row, LOGPROB_CHUNK_ROWS positions at a time
    (position t reads the logits at t - 1, so each chunk is a contiguous block of one row's logits)."""
    for row in range(batch):
        for start in range(1, length, LOGPROB_CHUNK_ROWS):
            yield row, start, min(start + LOGPROB_CHUNK_ROWS, length)


def scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 logits / temperature, the distribution the engine sampled from (the division skipped at
    temperature 1, where it is exact anyway)."""
    scores = logits.float()
    return scores if temperature == 1.0 else scores / max(temperature, 1e-6)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[B, L, V] -> [B, L]: entropy of the distribution that predicted token t; 0 at position 0."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return torch.nn.functional.pad(entropy, (1, 0), value=0.0)


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: Aggregation, constant_normaliser: float = 1024.0
) -> torch.Tensor:
    """[B, L] per-token values -> scalar, over tokens where mask is 1 (see `LossConfig.aggregation`)."""
    masked = values * mask
    if mode == "token_mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if mode == "constant":
        return masked.sum() / (constant_normaliser * values.shape[0])
    raise ConfigError(f"aggregation {mode!r} is unknown; use one of {AGGREGATIONS}")


def aggregation_weight(mask: torch.Tensor, mode: Aggregation) -> float:
    """The weight of a micro batch inside its mini batch, so that the weighted sum of micro-batch
    `aggregate`s equals `aggregate` over the whole mini batch: sampled tokens for token_mean, else rows."""
    return float(mask.sum().item()) if mode == "token_mean" else float(mask.shape[0])


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """[B, L]: k3 estimate of KL(pi || pi_ref) per token, r - log r - 1 with r = pi_ref / pi
    (Schulman, "Approximating KL divergence", 2020); non-negative, clamped to KL_CLAMP."""
    log_ratio = (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (log_ratio.exp() - log_ratio - 1.0).clamp(max=KL_CLAMP)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO clipped surrogate (arXiv 1707.06347 eq. 7), negated to a loss, over [B, L] tensors.

    loss_t = -min(r_t A_t, clip(r_t, 1 - clip_low, 1 + clip_high) A_t), r_t = exp(logp_t - old_logp_t).
    Metrics: clip_frac (share of sampled tokens where the clipped term is the smaller), approx_kl (k3 of
    KL(old || new) under the old policy's samples), ratio_mean.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high) * advantages
    loss = aggregate(-torch.minimum(unclipped, clipped), mask, config.aggregation, config.constant_normaliser)
    with torch.no_grad():
        metrics = {
            "clip_frac": _masked_mean((clipped < unclipped).float(), mask),
            "approx_kl": _masked_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_mean": _masked_mean(ratio, mask),
        }
    return loss, metrics


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip + kl_coef * KL(pi || pi_ref) - entropy_coef * entropy, each aggregated the same way.

    `ref_logprobs` is required when kl_coef > 0 and `entropy` (with grad) when entropy_coef > 0; when given
    otherwise they are only reported.
    """
    loss, metrics = ppo_clip_loss(logprobs, old_logprobs, advantages, mask, config)
    if ref_logprobs is not None:
        kl = aggregate(kl_k3(logprobs, ref_logprobs), mask, config.aggregation, config.constant_normaliser)
        loss = loss + config.kl_coef * kl
        metrics["kl"] = float(kl.item())
    elif config.kl_coef > 0:
        raise ConfigError("loss.kl_coef > 0 needs reference log-probs; load a reference model or set it to 0")
    if entropy is not None:
        mean_entropy = aggregate(entropy, mask, config.aggregation, config.constant_normaliser)
        loss = loss - config.entropy_coef * mean_entropy
        metrics["entropy"] = float(mean_entropy.item())
    elif config.entropy_coef > 0:
        raise ConfigError("loss.entropy_coef > 0 needs token entropies")
    return loss, metrics


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((values * mask).sum() / mask.sum().clamp(min=1.0)).item())
