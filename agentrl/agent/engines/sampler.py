"""Next-token sampling for a batch of rows with per-row temperature and top-p, and the sampler's log-probs.

What this is: `sample_next` over [B, V] logits. Semantics match `HFEngine` (transformers `generate` with
`top_k=0`): scores are logits / temperature, top-p keeps the smallest set of tokens whose probability mass
reaches `top_p` (at least one), the token is drawn with `torch.multinomial` from the global RNG (so
`torch.manual_seed` makes runs repeatable), and temperature 0 means argmax. The returned log-probability is
log_softmax(logits / T) at the chosen token, before top-p (greedy rows report T = 1), exactly what
`hf.sampled_logprobs` reports.

What this is not: a logits-processor framework (no repetition penalty, no top-k, no min-p).
"""

from __future__ import annotations

import torch


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
    scaled = logits / torch.where(greedy, torch.ones_like(temperatures), temperatures)[:, None]
    tokens = logits.argmax(dim=-1)
    sampled_rows = (~greedy).nonzero().squeeze(1)
    if sampled_rows.numel():
        scores = scaled[sampled_rows]
        row_top_p = top_ps[sampled_rows]
        if bool((row_top_p < 1.0).any()):
            scores = top_p_filter(scores, row_top_p)
        probs = torch.softmax(scores, dim=-1)
        own = [generators[row] if generators else None for row in sampled_rows.tolist()]
        if any(generator is not None for generator in own):
            drawn = torch.cat(
                [torch.multinomial(probs[i : i + 1], 1, generator=g).squeeze(1) for i, g in enumerate(own)]
            )
        else:
            drawn = torch.multinomial(probs, num_samples=1).squeeze(1)
        tokens[sampled_rows] = drawn
    logprobs = torch.log_softmax(scaled, dim=-1).gather(1, tokens[:, None]).squeeze(1)
    return tokens, logprobs


def top_p_filter(scores: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """[B, V] scores, tokens outside each row's nucleus set to -inf (as transformers' TopPLogitsWarper)."""
    ascending, order = torch.sort(scores, dim=-1)
    cumulative = torch.softmax(ascending, dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1.0 - top_ps)[:, None]
    remove_sorted[:, -1] = False  # always keep the most likely token
    remove = remove_sorted.scatter(1, order, remove_sorted)
    return scores.masked_fill(remove, float("-inf"))
