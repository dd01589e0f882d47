"""The cached engine's logic on a tiny random Llama (hidden 64, 2 layers; seconds): prefix matching and LRU
eviction, prefill grouping, the sampler against transformers' warpers, the hand-written forward against the
HF module, greedy equality with `HFEngine` over two turns, cross-turn reuse, continuous batching, stop
strings, cancellation, weight updates, and the refusal of non-Llama models.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest
import torch
from tiny_models import tiny_llama as shared_tiny_llama
from tiny_tokenizers import byte_tokenizer
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM
from transformers.generation.logits_process import TopPLogitsWarper

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig, make_engine
from agentrl.agent.engines.hf import HFEngine
from agentrl.agent.engines.prefix_cache import PrefixCache, common_prefix_length, longest_common_prefix
from agentrl.agent.engines.sampler import inverse_cdf, sample_next, token_entropy, top_p_filter
from agentrl.agent.engines.scheduler import prefill_groups
from agentrl.errors import InvalidPrompt, ModelError

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12, stop=())
FP32 = CachedEngineConfig(precision="float32")


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    return shared_tiny_llama(hidden=64, seed=seed)


@pytest.fixture
def engine() -> CachedEngine:
    return CachedEngine(tiny_llama(), byte_tokenizer(), FP32)


def prompts(engine: CachedEngine, count: int = 4) -> list[list[int]]:
    shared = "<|im_start|>system\nYou solve tasks with tools. Be brief.<|im_end|>\n<|im_start|>user\n"
    texts = [f"{shared}Question {i}: {'why ' * i}?<|im_end|>\n<|im_start|>assistant\n" for i in range(count)]
    return [list(engine.tokenizer.encode(text)) for text in texts]


def naive(engine: CachedEngine, prompt: Sequence[int], params: SamplingParams) -> Completion:
    """The same completion through HFEngine (transformers generate), unbatched."""
    return HFEngine(engine.model, engine.tokenizer).generate_batch([prompt], params)[0]


# -- pure parts -----------------------------------------------------------------------------------------


def kv(length: int) -> torch.Tensor:
    return torch.zeros((2, 1, 1, length, 2))


def test_prefix_cache_matches_the_longest_shared_prefix_and_marks_it_used() -> None:
    cache = PrefixCache(max_tokens=100)
    cache.insert([1, 2, 3, 4], kv(4))
    cache.insert([1, 2, 9], kv(3))
    match = cache.match([1, 2, 3, 7, 7])
    assert match is not None and match.length == 3 and match.entry.tokens.tolist() == [1, 2, 3, 4]
    assert cache.entries()[-1].tokens.tolist() == [1, 2, 3, 4]  # most recently used last
    limited = cache.match([1, 2, 3, 4], limit=2)
    assert limited is not None and limited.length == 2
    assert cache.match([5, 1, 2]) is None


def test_prefix_cache_drops_entries_a_new_one_extends_and_skips_covered_ones() -> None:
    cache = PrefixCache(max_tokens=100)
    cache.insert([1, 2, 3], kv(3))
    cache.insert([1, 2, 3, 4, 5], kv(5))  # the next turn of the same episode replaces the previous one
    assert [entry.tokens.tolist() for entry in cache.entries()] == [[1, 2, 3, 4, 5]]
    assert cache.insert([1, 2, 3], kv(3)) is None  # already covered
    assert len(cache) == 1


def test_prefix_cache_evicts_least_recently_used_entries_under_its_token_budget() -> None:
    cache = PrefixCache(max_tokens=10)
    cache.insert([1, 1, 1, 1], kv(4))
    cache.insert([2, 2, 2, 2], kv(4))
    cache.match([1, 1])  # touch the first: the second is now least recently used
    cache.insert([3, 3, 3, 3], kv(4))
    assert [entry.tokens[0].item() for entry in cache.entries()] == [1, 3]
    assert cache.total_tokens == 8
    assert cache.insert(list(range(11)), kv(11)) is None  # larger than the whole budget


def test_prefix_helpers() -> None:
    assert common_prefix_length(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5])) == 2
    assert common_prefix_length(torch.tensor([1, 2]), torch.tensor([1, 2, 4])) == 2
    assert longest_common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert longest_common_prefix([]) == 0


def test_prefill_groups_split_when_padding_would_waste_too_much() -> None:
    assert prefill_groups([30, 31, 32], max_waste=0.5) == [(0, 3)]
    assert prefill_groups([2, 30, 31], max_waste=0.5) == [(0, 1), (1, 3)]
    assert prefill_groups([5], max_waste=0.5) == [(0, 1)]


def test_top_p_filter_matches_transformers() -> None:
    torch.manual_seed(1)
    scores = torch.randn(3, 50)
    for top_p in (0.3, 0.9):
        expected = TopPLogitsWarper(top_p)(torch.zeros((3, 1), dtype=torch.long), scores.clone())
        assert torch.equal(top_p_filter(scores, torch.full((3,), top_p)), expected)


def test_sampler_greedy_rows_take_the_argmax_and_report_temperature_one_logprobs() -> None:
    torch.manual_seed(2)
    logits = torch.randn(3, 20)
    temperatures, top_ps = torch.tensor([0.0, 0.7, 1.0]), torch.tensor([1.0, 0.9, 1.0])
    torch.manual_seed(3)
    tokens, logprobs = sample_next(logits, temperatures, top_ps)
    torch.manual_seed(3)
    again, _ = sample_next(logits, temperatures, top_ps)
    assert torch.equal(tokens, again)  # the global RNG: seeding repeats the draw
    assert tokens[0] == logits[0].argmax()
    scaled = logits / torch.tensor([1.0, 0.7, 1.0])[:, None]
    expected = torch.log_softmax(scaled, dim=-1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.allclose(logprobs, expected)


@pytest.mark.skipif(not kernels.native_cpu_bf16(), reason="oneDNN packs bf16 weights only on bf16 CPUs")
def test_token_entropy_is_that_of_the_sampled_distribution_before_top_p() -> None:
    vocab = 8
    flat = torch.zeros(1, vocab)
    assert torch.allclose(token_entropy(flat, torch.tensor([0.7])), torch.tensor([math.log(vocab)]))
    masked = torch.tensor([[0.0, float("-inf"), float("-inf"), 0.0]])  # two tokens left: log 2, no NaN
    assert torch.allclose(token_entropy(masked, torch.tensor([1.0])), torch.tensor([math.log(2)]))
    logits = torch.randn(3, vocab)
    temperatures = torch.tensor([0.5, 0.0, 2.0])  # the greedy row at T = 1, as its log-probs
    scaled = torch.stack([logits[0] / 0.5, logits[1], logits[2] / 2.0])
    expected = -(torch.softmax(scaled, -1) * torch.log_softmax(scaled, -1)).sum(-1)
    assert torch.allclose(token_entropy(logits, temperatures), expected, atol=1e-6)


def test_both_in_process_engines_report_the_first_tokens_entropy_from_the_models_logits(
    engine: CachedEngine,
) -> None:
    batch = prompts(engine, count=3)
    params = SamplingParams(temperature=0.8, max_new_tokens=3, stop=())
    cached = engine.generate_batch(batch, params)
    for prompt, completion in zip(batch, cached, strict=True):
        with torch.no_grad():
            logits = engine.model(torch.tensor([prompt])).logits[0, -1]
        expected = float(token_entropy(logits[None], torch.tensor([0.8]))[0])
        assert completion.first_token_entropy == pytest.approx(expected, abs=1e-4)
        assert naive(engine, prompt, params).first_token_entropy == pytest.approx(expected, abs=1e-4)


def test_prepacked_bf16_weights_give_the_same_logits_as_plain_ones() -> None:
    model = tiny_llama()
    packed = kernels.LlamaWeights.from_model(model, torch.bfloat16, pack=True)
    plain = kernels.LlamaWeights.from_model(model, torch.bfloat16, pack=False)
    assert packed.lm_head.is_mkldnn and not plain.lm_head.is_mkldnn
    ids = torch.randint(0, 200, (3, 6))
    with torch.inference_mode():
        logits = [
            kernels.forward(
                w, ids, torch.zeros(3, dtype=torch.long), kernels.new_cache(w, 3, 8), torch.full((3,), 5)
            )
            for w in (packed, plain)
        ]
    assert torch.equal(logits[0], logits[1])


def test_inverse_cdf_draws_each_index_with_its_probability_and_never_a_zero_one() -> None:
    torch.manual_seed(4)
    probs = torch.rand(2, 23) ** 3  # 23 entries in blocks of 4: the last block is padded
    probs[:, ::5] = 0.0
    probs[1, 8:] = 0.0  # row 1's mass ends inside a block, followed by empty blocks
    grid = 20_000
    uniform = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid  # evenly spread over [0, 1)
    for row in range(2):
        drawn = inverse_cdf(probs[row].expand(grid, -1), uniform, block=4)
        frequency = torch.bincount(drawn, minlength=23).double() / grid
        expected = probs[row].double() / probs[row].double().sum()
        assert float((frequency - expected).abs().max()) <= 1.0 / grid
        assert bool((probs[row][drawn] > 0).all())
    # a uniform that rounds up to the total still lands on an entry with mass
    edge = inverse_cdf(probs, torch.full((2,), 1.0 - 2.0**-53, dtype=torch.float64), block=4)
    assert edge.tolist() == [int(probs[0].nonzero().max()), int(probs[1].nonzero().max())]


def test_sampler_per_row_generators_draw_independently_of_the_other_rows() -> None:
    torch.manual_seed(5)
    logits = torch.randn(3, 40)
    ones = torch.ones(3)

    def draw(other_seed: int) -> int:
        generators = [torch.Generator().manual_seed(other_seed), torch.Generator().manual_seed(9), None]
        tokens, _ = sample_next(logits, ones, ones, generators)
        return int(tokens[1])

    assert len({draw(seed) for seed in range(6)}) == 1


def test_forward_matches_the_hf_module_for_padded_rows_at_different_positions() -> None:
    model = tiny_llama()
    weights = kernels.LlamaWeights.from_model(model, torch.float32)
    first, second = torch.randint(0, 200, (1, 9)), torch.randint(0, 200, (1, 5))
    with torch.inference_mode():
        cache = kernels.new_cache(weights, rows=2, capacity=16)
        kernels.forward(weights, first[:, :4], torch.tensor([0]), cache[:, :, :1], torch.tensor([3]))
        ids = torch.zeros((2, 5), dtype=torch.long)
        ids[0], ids[1] = first[0, 4:], second[0]
        logits = kernels.forward(weights, ids, torch.tensor([4, 0]), cache, torch.tensor([4, 4]))
        expected_first = model(first).logits[0, -1]
        expected_second = model(second).logits[0, -1]
    assert torch.allclose(logits[0], expected_first, atol=1e-5)
    assert torch.allclose(logits[1], expected_second, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_attends_to_a_shared_prefix_once_with_the_same_result(dtype: torch.dtype) -> None:
    weights = kernels.LlamaWeights.from_model(tiny_llama(), dtype)
    prefix = torch.randint(0, 200, (1, 6)).repeat(3, 1)
    rows = torch.cat([prefix, torch.randint(0, 200, (3, 4))], dim=1)  # 6 shared tokens, then different
    step = torch.randint(0, 200, (3, 1))
    results = []
    with torch.inference_mode():
        for shared in (0, 6):
            cache = kernels.new_cache(weights, rows=3, capacity=16)
            starts = torch.tensor([0, 0, 0])
            kernels.forward(weights, rows, starts, cache, torch.tensor([9, 9, 9]))
            lengths = torch.tensor([10, 10, 10])
            results.append(
                kernels.forward(weights, step, lengths, cache, torch.zeros(3, dtype=torch.long), shared)
            )
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    assert torch.allclose(results[0], results[1], atol=tolerance)


def test_best_dtype_is_bf16_or_fp32() -> None:
    assert kernels.best_dtype() in (torch.bfloat16, torch.float32)


# -- the engine on a tiny model ---------------------------------------------------------------------------


def test_greedy_two_turns_match_hf_and_turn_two_prefills_only_new_tokens(engine: CachedEngine) -> None:
    first_prompts = prompts(engine)
    first = engine.generate_batch(first_prompts, GREEDY)
    assert [c.token_ids for c in first] == [naive(engine, p, GREEDY).token_ids for p in first_prompts]
    observation = list(engine.tokenizer.encode("<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n"))
    second_prompts = [[*p, *c.token_ids, *observation] for p, c in zip(first_prompts, first, strict=True)]
    before = engine.stats.prefilled_tokens
    second = engine.generate_batch(second_prompts, GREEDY)
    # per episode: the last sampled token (never fed back in turn 1) plus the observation
    assert engine.stats.prefilled_tokens - before == len(second_prompts) * (1 + len(observation))
    for prompt, completion in zip(second_prompts, second, strict=True):
        expected = naive(engine, prompt, GREEDY)
        assert completion.token_ids == expected.token_ids
        assert torch.allclose(torch.tensor(completion.logprobs), torch.tensor(expected.logprobs), atol=1e-4)


def test_the_common_prefix_of_requests_arriving_together_is_prefilled_once(engine: CachedEngine) -> None:
    batch = prompts(engine, count=4)
    shared = longest_common_prefix(batch)
    engine.generate_batch(batch, SamplingParams(temperature=0.0, max_new_tokens=1, stop=()))
    assert engine.stats.prefilled_tokens == shared + sum(len(p) - shared for p in batch)
    assert engine.stats.reused_tokens == 4 * shared


def test_more_requests_than_rows_join_as_rows_free_up(engine: CachedEngine) -> None:
    small = CachedEngine(engine.model, engine.tokenizer, CachedEngineConfig(precision="float32", max_batch=2))
    batch = prompts(engine, count=5)
    params = [SamplingParams(temperature=0.0, max_new_tokens=n, stop=()) for n in (3, 9, 4, 6, 2)]
    handles = [small.scheduler.submit(p, q) for p, q in zip(batch, params, strict=True)]
    running: list[int] = []
    done: dict[int, Completion] = {}
    while small.scheduler.busy:
        done.update(small.scheduler.step())
        running.append(len(small.scheduler._running))
    assert max(running) == 2 and small.stats.decode_steps < sum(q.max_new_tokens for q in params)
    for handle, prompt, param in zip(handles, batch, params, strict=True):
        assert done[handle].token_ids == naive(engine, prompt, param).token_ids


def test_requests_arriving_at_different_times_all_complete_correctly(engine: CachedEngine) -> None:
    batch = prompts(engine, count=4)

    async def late(prompt: list[int], delay: float) -> Completion:
        await asyncio.sleep(delay)
        return await engine.generate(prompt, GREEDY)

    async def run() -> list[Completion]:
        try:
            return list(await asyncio.gather(*(late(p, 0.01 * i) for i, p in enumerate(batch))))
        finally:
            await engine.aclose()

    completions = asyncio.run(run())
    assert [c.token_ids for c in completions] == [naive(engine, p, GREEDY).token_ids for p in batch]


def test_a_stop_string_ends_the_turn_at_the_token_completing_it(engine: CachedEngine) -> None:
    prompt = prompts(engine)[1]
    free = engine.generate_batch([prompt], GREEDY)[0]
    stop = engine.tokenizer.decode(list(free.token_ids[3:5]))  # two bytes: two tokens
    stopped = engine.generate_batch(
        [prompt], SamplingParams(temperature=0.0, max_new_tokens=12, stop=(stop,))
    )[0]
    cut = engine.tokenizer.decode(list(free.token_ids)).index(stop) + len(stop)
    assert stopped.token_ids == free.token_ids[:cut] and stopped.finish_reason == "stop"
    assert not stopped.ended_turn and free.finish_reason == "length"


def test_cancelled_callers_free_their_rows_and_bad_prompts_fail_alone(engine: CachedEngine) -> None:
    batch = prompts(engine, count=2)

    async def run() -> tuple[Completion, int]:
        long = asyncio.ensure_future(
            engine.generate(batch[0], SamplingParams(temperature=0.0, max_new_tokens=200))
        )
        await asyncio.sleep(0.05)
        long.cancel()
        with pytest.raises(InvalidPrompt):
            await engine.generate([10_000], GREEDY)
        try:
            return await engine.generate(batch[1], GREEDY), len(engine.scheduler._running)
        finally:
            await engine.aclose()

    completion, still_running = asyncio.run(run())
    assert completion.token_ids == naive(engine, batch[1], GREEDY).token_ids and still_running == 0


def test_an_in_place_weight_update_empties_the_prefix_cache(engine: CachedEngine) -> None:
    prompt = prompts(engine)[0]
    before = engine.generate_batch([prompt], GREEDY)[0]
    assert len(engine.scheduler.prefix_cache) > 0
    with torch.no_grad():
        for parameter in engine.model.parameters():
            parameter.mul_(1.5)
    after = engine.generate_batch([prompt], GREEDY)[0]
    assert after.token_ids == naive(engine, prompt, GREEDY).token_ids != before.token_ids
    assert engine.stats.reused_tokens == 0  # nothing from before the update was reused


def test_non_llama_models_are_refused_and_make_engine_falls_back_to_hf() -> None:
    tokenizer = byte_tokenizer()
    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=1, n_head=2)
    )
    with pytest.raises(ModelError, match="Llama"):
        CachedEngine(gpt2, tokenizer)
    assert isinstance(make_engine(gpt2, tokenizer), HFEngine)
    assert isinstance(make_engine(tiny_llama(), tokenizer), CachedEngine)


def test_an_update_by_fused_adamw_reaches_the_compute_copy_through_load_weights() -> None:
    # fused AdamW writes parameters without bumping their version counters, so the engine must be told;
    # deterministic=False: the compute copy is then a plain tensor (the exact kernels prepack it for oneDNN)
    model = tiny_llama()
    config = CachedEngineConfig(precision="float32", deterministic=False)
    engine = CachedEngine(model, byte_tokenizer(), config)
    before = engine.scheduler.weights.lm_head.clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    optimizer.step()
    engine.load_weights(None)
    assert not torch.equal(engine.scheduler.weights.lm_head, before)
    assert torch.equal(engine.scheduler.weights.lm_head, model.lm_head.weight.detach())


def test_dithered_bf16_rounding_is_unbiased_and_keeps_its_thresholds() -> None:
    values = torch.full((200_000,), 1.0 + 2**-10)  # a quarter of a bf16 ulp above 1.0
    rounded = kernels.round_bf16(values, threshold_seed=7).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert rounded.double().mean().item() == pytest.approx(1.0 + 2**-10, abs=2e-5)
    assert torch.equal(kernels.round_bf16(values, 7), kernels.round_bf16(values, 7))  # fixed thresholds
    exact = torch.tensor([0.5, -3.0, 1.0 + 2**-7])
    assert torch.equal(kernels.round_bf16(exact, 7).float(), exact)  # bf16 values stay as they are
    # a small step moves each weight by one ulp with probability step / ulp, and never backwards
    moved = kernels.round_bf16(values + 2**-9, 7).float() - rounded
    assert moved.min().item() >= 0 and moved.double().mean().item() == pytest.approx(2**-9, rel=0.05)
