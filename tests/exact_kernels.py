"""A test helper for the cached engine's exact kernels (`llama_kernels.forward(exact=True)`): play one row's
tokens through a batch the way the engine would, so tests can compare the row's K/V and logits across batch
shapes and prefill/decode splits. Used by tests/unit/test_engine_deterministic.py (tiny random Llama) and
tests/integration/test_engine_cached.py (SmolLM2). Not a test itself.
"""

from __future__ import annotations

import torch

from agentrl.agent.engines import llama_kernels as kernels


def play_row(
    weights: kernels.LlamaWeights,
    tokens: torch.Tensor,
    generator: torch.Generator,
    rows: int,
    prefill: int,
    longer: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(last logits, K/V) of row 0, which prefills `prefill` of `tokens` and decodes the rest one step at a
    time; the other rows hold noise, the last one `longer` tokens more than row 0 (so the batch attends over
    more key blocks than row 0 alone)."""
    vocab = weights.embed.shape[0]
    lengths = torch.tensor([prefill] + [max(1, prefill - 3 * row) for row in range(1, rows)])
    if longer:
        lengths[-1] = prefill + longer
    width = int(lengths.max())
    capacity = -(-(width + len(tokens)) // kernels.EXACT_KEYS) * kernels.EXACT_KEYS
    cache = kernels.new_cache(weights, rows, capacity)
    ids = torch.randint(0, vocab, (rows, width), generator=generator)
    ids[0, :prefill] = tokens[:prefill]
    start = torch.zeros(rows, dtype=torch.long)
    logits = kernels.forward(weights, ids, start, cache, lengths - 1, exact=True)[0]
    for step in range(len(tokens) - prefill):
        step_ids = torch.randint(0, vocab, (rows, 1), generator=generator)
        step_ids[0, 0] = tokens[prefill + step]
        at = torch.zeros(rows, dtype=torch.long)
        logits = kernels.forward(weights, step_ids, lengths + step, cache, at, exact=True)[0]
    return logits, cache[:, :, 0, :, : len(tokens)].clone()
