"""Batch-invariant decoding in the cached engine (`engine.cached.deterministic`) on a tiny random Llama: a
seeded request gives bit-identical tokens and log-probs alone, among 31 other requests, arriving mid-way
through another batch's decode, and after its prefix was cached by an earlier turn or by the shared-prefix
prefill; and the exact kernels' K/V and logits do not depend on the batch or on prefill versus decode.
The same checks on the real SmolLM2-135M are in tests/integration/test_engine_cached.py.
"""

from __future__ import annotations

import pytest
import torch
from exact_kernels import play_row
from tiny_models import tiny_llama
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.engines.prefix_cache import PrefixCache

SEEDED = SamplingParams(temperature=1.0, max_new_tokens=24, stop=(), seed=1234)
PRECISIONS = ["bfloat16", "float32"]


def new_engine(precision: str) -> CachedEngine:
    config = CachedEngineConfig(precision=precision)  # type: ignore[arg-type]
    return CachedEngine(tiny_llama(hidden=64), byte_tokenizer(), config)


def prompt(engine: CachedEngine, index: int) -> list[int]:
    system = "<|im_start|>system\nYou solve tasks with tools. Be brief.<|im_end|>\n<|im_start|>user\n"
    text = f"{system}Question {index}: {'why ' * (index % 7)}?<|im_end|>\n<|im_start|>assistant\n"
    return list(engine.tokenizer.encode(text))


def others(engine: CachedEngine, count: int) -> list[tuple[list[int], SamplingParams]]:
    """`count` other requests: seeded and unseeded, other temperatures, top-p and lengths."""
    return [
        (
            prompt(engine, index + 1),
            SamplingParams(
                temperature=(0.0, 0.7, 1.0)[index % 3],
                top_p=0.9 if index % 4 == 0 else 1.0,
                max_new_tokens=8 + index % 23,
                stop=(),
                seed=None if index % 2 else index,
            ),
        )
        for index in range(count)
    ]


def alone(precision: str) -> Completion:
    engine = new_engine(precision)
    return engine.generate_batch([prompt(engine, 0)], SEEDED)[0]


def same(first: Completion, second: Completion) -> bool:
    return first.token_ids == second.token_ids and first.logprobs == second.logprobs


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_seeded_request_is_the_same_alone_and_among_31_others(precision: str) -> None:
    reference = alone(precision)
    engine = new_engine(precision)
    handles = [engine.scheduler.submit(p, params) for p, params in others(engine, 15)]
    target = engine.scheduler.submit(prompt(engine, 0), SEEDED)
    handles += [engine.scheduler.submit(p, params) for p, params in others(engine, 16)]
    engine.set_eval()
    done = engine.scheduler.run_to_completion()
    assert len(done) == 32 and len(handles) == 31
    assert same(done[target], reference)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_seeded_request_arriving_mid_decode_is_the_same_as_alone(precision: str) -> None:
    reference = alone(precision)
    engine = new_engine(precision)
    engine.set_eval()
    for p, params in others(engine, 8):
        engine.scheduler.submit(p, params)
    for _ in range(5):
        engine.scheduler.step()
    target = engine.scheduler.submit(prompt(engine, 0), SEEDED)
    assert same(engine.scheduler.run_to_completion()[target], reference)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_seeded_second_turn_is_the_same_with_or_without_its_cached_first_turn(precision: str) -> None:
    engine = new_engine(precision)
    first = engine.generate_batch([prompt(engine, 0)], SEEDED)[0]
    second_prompt = [*prompt(engine, 0), *first.token_ids, *engine.tokenizer.encode("\n8\n")]
    reused_before = engine.stats.reused_tokens
    cached = engine.generate_batch([second_prompt], SEEDED)[0]
    assert engine.stats.reused_tokens - reused_before >= len(prompt(engine, 0))  # the cache was used
    fresh = new_engine(precision).generate_batch([second_prompt], SEEDED)[0]
    assert same(cached, fresh)


def test_released_memory_is_rebuilt_and_decoding_continues_unchanged() -> None:
    """`release_memory` (before an update) drops the batch KV, the prefix cache and the compute copy;
    the next request rebuilds them and decodes exactly as a fresh engine does."""
    engine = new_engine("bfloat16")
    first = engine.generate_batch([prompt(engine, 0)], SEEDED)[0]
    scheduler = engine.scheduler
    assert scheduler._kv is not None and scheduler._weights is not None and len(scheduler.prefix_cache) > 0
    engine.release_memory()
    assert scheduler._kv is None and scheduler._weights is None and len(scheduler.prefix_cache) == 0
    again = engine.generate_batch([prompt(engine, 0)], SEEDED)[0]
    assert same(again, first)
    engine.scheduler.submit(prompt(engine, 1), SEEDED)  # a request in flight: nothing is dropped
    assert scheduler.release() is False and scheduler._weights is not None


def test_unseeded_kv_is_not_reused_by_a_seeded_request() -> None:
    engine = new_engine("bfloat16")
    unseeded = SamplingParams(temperature=1.0, max_new_tokens=4, stop=())
    engine.generate_batch([prompt(engine, i) for i in range(4)], unseeded)  # inexact entries only
    reused_before = engine.stats.reused_tokens
    assert same(engine.generate_batch([prompt(engine, 0)], SEEDED)[0], alone("bfloat16"))
    assert engine.stats.reused_tokens == reused_before


def test_exact_entries_survive_inexact_ones_and_only_exact_ones_answer_exact_matches() -> None:
    cache = PrefixCache(max_tokens=100)
    kv = torch.zeros((2, 1, 1, 6, 2))
    cache.insert([1, 2, 3], kv[:, :, :, :3], exact=True)
    cache.insert([1, 2, 3, 4, 5, 6], kv)  # extends it, but is inexact: both stay
    assert len(cache) == 2
    match = cache.match([1, 2, 3, 4, 5], exact=True)
    assert match is not None and match.length == 3 and match.entry.exact
    plain = cache.match([1, 2, 3, 4, 5])
    assert plain is not None and plain.length == 5
    cache.insert([1, 2, 3, 4, 5, 6, 7], torch.zeros((2, 1, 1, 7, 2)), exact=True)  # replaces both
    assert len(cache) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_exact_forward_gives_a_row_the_same_kv_and_logits_whatever_the_batch_and_prefill_split(
    dtype: torch.dtype,
) -> None:
    model = tiny_llama(hidden=64)
    weights = kernels.LlamaWeights.from_model(model, dtype, pack=True)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, weights.embed.shape[0], (100,), generator=generator)

    with torch.inference_mode():
        reference_logits, reference_kv = play_row(weights, tokens, generator, 1, len(tokens) - 1)
        for rows, prefill, longer in ((7, len(tokens) - 1, 0), (1, 40, 0), (5, 61, 0), (3, 61, 600)):
            logits, kv = play_row(weights, tokens, generator, rows, prefill, longer)
            assert torch.equal(logits, reference_logits) and torch.equal(kv, reference_kv)
