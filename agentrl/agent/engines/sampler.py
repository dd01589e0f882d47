"""Next-token sampling for a batch of rows with per-row temperature and top-p, and the sampler's log-probs.

What this is: `sample_next` over [B, V] logits. Semantics match `HFEngine` (transformers `generate` with
`top_k=0`): scores are logits / temperature, top-p keeps the smallest set of tokens whose probability mass
reaches `top_p` (at least one), the token is drawn by inverting the row's cumulative distribution (float64)
at one uniform number from the global RNG (so `torch.manual_seed` makes runs repeatable), and temperature 0
means argmax. The returned log-probability is log_softmax(logits / T) at the chosen token, before top-p
(greedy rows report T = 1), exactly what `hf.sampled_logprobs` reports; the full-vocabulary log_softmax is
computed once per step, and without top-p the sampling probabilities are its exponential. `token_entropy`
gives the entropy of that same distribution (the engines report it for a completion's first token).

Why not `torch.multinomial`: on CPU it draws one exponential variate per vocabulary entry (an exponential
race), several times slower than exp + cumsum + searchsorted (docs/benchmarks.md, "Figures behind design
choices").
The drawn distribution is the same; the stream of random numbers, so the exact tokens for a given seed,
differ.

What this is not: a logits-processor framework (no repetition penalty, no top-k, no min-p).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sample_next(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ps: torch.Tensor,
    generators: list[torch.Generator | None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens [B] and their log-probs [B] from fp32 `logits` [B, V]; `temperatures`, `top_ps` are [B].

    `generators[i]`, when given, draws row i's token (a per-request seed: the draw does not depend on the
    other rows); rows without one draw from the global RNG."""
    greedy = temperatures <= 0
    unit = bool(((temperatures == 1.0) | greedy).all())
    scaled = (
        logits if unit else logits / torch.where(greedy, torch.ones_like(temperatures), temperatures)[:, None]
    )
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    sampled_rows = (~greedy).nonzero().squeeze(1)
    every_row = sampled_rows.numel() == logits.shape[0]
    tokens = torch.zeros(logits.shape[0], dtype=torch.long) if every_row else logits.argmax(dim=-1)
    if sampled_rows.numel():
        probs = (logprobs_all if every_row else logprobs_all[sampled_rows]).exp()
        nucleus = (top_ps[sampled_rows] < 1.0).nonzero().squeeze(1)
        if nucleus.numel():  # only those rows: a row's probabilities must not depend on the others' top-p
            rows = sampled_rows[nucleus]
            probs[nucleus] = torch.softmax(top_p_filter(scaled[rows], top_ps[rows]), dim=-1)
        own = [generators[row] if generators else None for row in sampled_rows.tolist()]
        tokens[sampled_rows] = inverse_cdf(probs, uniforms(own))
    logprobs = logprobs_all.gather(1, tokens[:, None]).squeeze(1)
    return tokens, logprobs


def token_entropy(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """[B] entropy in nats of softmax(logits / T) for each row of `logits` [B, V], `temperatures` [B]: the
    distribution `sample_next` draws from, before top-p; greedy rows (T <= 0) at T = 1, as their log-probs.
    A masked (-inf) logit adds nothing."""
    scale = torch.where(temperatures <= 0, torch.ones_like(temperatures), temperatures)
    probs = torch.softmax(logits.float() / scale[:, None], dim=-1)
    return torch.special.entr(probs).sum(dim=-1)


def uniforms(generators: list[torch.Generator | None]) -> torch.Tensor:
    """[N] float64 uniforms in [0, 1): row i from `generators[i]`, rows without one from the global RNG."""
    if all(generator is None for generator in generators):
        return torch.rand(len(generators), dtype=torch.float64)
    return torch.cat([torch.rand(1, dtype=torch.float64, generator=g) for g in generators])


def inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """[N] indices drawn from the rows of `probs` [N, V] (non-negative, positive total) at `uniform` [N] in
    [0, 1): the first index whose cumulative mass exceeds uniform * total, so a zero-probability entry is
    never chosen. Two levels: the `block`-wide block holding that mass (block sums in the input dtype,
    accumulated in float64), then the index inside it (float64), so one pass over the row plus one block
    instead of a float64 copy and cumulative sum of all of it. Rounding moves an entry's chance by about the
    input dtype's epsilon times its block's mass at most."""
    rows, vocab = probs.shape
    blocks = -(-vocab // block)
    padded = probs if vocab == blocks * block else F.pad(probs, (0, blocks * block - vocab))
    grid = padded.view(rows, blocks, block)
    cumulative = grid.sum(-1).double().cumsum(-1)  # [N, blocks]
    target = uniform[:, None] * cumulative[:, -1:]  # [N, 1]
    chosen = _first_above(cumulative, target)
    before = torch.where(chosen > 0, cumulative.gather(1, (chosen - 1).clamp(min=0)), 0.0)
    inside = grid[torch.arange(rows), chosen.squeeze(1)].double().cumsum(-1)  # [N, block]
    return (chosen * block + _first_above(inside, target - before)).squeeze(1)


def _first_above(cumulative: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[N, 1] first index where the non-decreasing `cumulative` [N, K] exceeds `target` [N, 1]; where
    rounding puts the target at or past the end, the first index reaching the row's total (its last
    entry of positive mass)."""
    above = torch.searchsorted(cumulative, target, right=True)
    last_positive = torch.searchsorted(cumulative, cumulative[:, -1:].contiguous())
    return torch.minimum(above, last_positive)


def top_p_filter(scores: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """[B, V] scores, tokens outside each row's nucleus set to -inf (as transformers' TopPLogitsWarper)."""
    ascending, order = torch.sort(scores, dim=-1)
    cumulative = torch.softmax(ascending, dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1.0 - top_ps)[:, None]
    remove_sorted[:, -1] = False  # always keep the most likely token
    remove = remove_sorted.scatter(1, order, remove_sorted)
    return scores.masked_fill(remove, float("-inf"))
