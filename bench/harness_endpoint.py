"""Per-call overhead of the harness endpoint against the engine alone, same run, same prompts (JSON).

    .venv/bin/python bench/harness_endpoint.py          # SmolLM2-135M, cached engine, 4 x 3 calls, 16 tok
    .venv/bin/python bench/harness_endpoint.py --quick  # 2 x 2 calls, printed only unless given --out

A harness's multi-turn conversation (the plain `openai` client in a thread of its own, tools shown, tool
results sent back as tool messages, so each call after the first continues its token sequence) is played
against the endpoint, which renders, samples with the engine and records every call; the engine alone is
fed the very prompt ids the endpoint fed it, one after the other, in the same order. Sampling is greedy
with the same parameters, so both paths generate the same tokens (`completions_identical`; bf16 kernels
on a loaded CPU can flip a near-tie, after which the endpoint's later prompts in that conversation
differ: `identical_endpoint_calls` counts the calls that matched the recording). The prefix cache is
emptied at the start of each conversation on both paths, so turn t reuses turn t-1's KV on both. A first
pass through the endpoint records the prompts (and warms up); then each conversation runs through both
paths back to back, alternating which goes first, so load that drifts over time (a shared machine) hits
both alike. Per call:
    engine_ms     `engine.generate` alone
    endpoint_ms   the client's `chat.completions.create` (HTTP, JSON, rendering, the continuation's
                  tokens, parsing, recording, and the same generation)
    ratio         endpoint_ms / engine_ms, and overhead_ms = endpoint_ms - engine_ms
    cpu_ratio     the same for process CPU time (every thread), steadier than wall time on a loaded machine
    endpoint_only the endpoint over an engine that returns each recorded completion at once: the
                  endpoint's own cost per call, with no generation to blur it
and, once, the cost of starting and stopping an endpoint (one per episode in training). Medians and means,
with the 1-minute load average beside them. Written to bench/results/harness_endpoint.json (`--out`; '-':
print only); the CPU's flags are in the file's `harness` block (bench/harness.py).

What this is not: a throughput benchmark (one conversation at a time, so there is no batching to hide
the overhead behind).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import harness
from openai import OpenAI

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig
from agentrl.env.core import tool_spec
from agentrl.harness.endpoint import ChatEndpoint, chat_format
from agentrl.harness.recorder import EpisodeRecorder
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.types import SessionStart

TOOLS = [tool_spec("guess", "Guess the hidden number.", {"number": {"type": "integer"}})]
SYSTEM = "Find the hidden number between 1 and 100 with the guess tool. One guess per turn."
ANSWERS = ["higher", "lower", "higher", "lower", "higher"]


class NoEnv:
    """The conversations make no env steps; the recorder needs a session client only for those."""

    async def create_session(self, *args: Any) -> Any:
        raise NotImplementedError

    async def step(self, *args: Any) -> Any:
        raise NotImplementedError

    async def close_session(self, *args: Any) -> None:
        return None


def conversation(base_url: str, api_key: str, turns: int, question: str) -> list[float]:
    """The harness: `turns` calls of one conversation; the client-side seconds of each."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    seconds = []
    for turn in range(turns):
        started = time.perf_counter()
        response = client.chat.completions.create(
            model="agentrl",
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        )
        seconds.append(time.perf_counter() - started)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        answer = ANSWERS[turn % len(ANSWERS)]
        if message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": answer})
        else:
            messages.append(
                {"role": "user", "content": f"Call the guess tool. Your last guess was {answer}."}
            )
    return seconds


Calls = list[tuple[tuple[int, ...], Completion]]
HARNESS = HarnessConfig(rate_per_s=1e6, rate_burst=10**6)
ROLLOUT = RolloutConfig(max_turns=10**6, max_context_tokens=8192)


class ReplayEngine:
    """An engine that costs nothing: each prompt's recorded completion, at once (the endpoint's own cost)."""

    def __init__(self, tokenizer: Any, calls: list[Calls]) -> None:
        self.tokenizer = tokenizer
        self.recorded = {prompt: completion for conversation in calls for prompt, completion in conversation}

    async def generate(self, prompt_ids: Any, params: SamplingParams) -> Completion:
        return self.recorded[tuple(prompt_ids)]


def clear_cache(engine: Any) -> None:
    if isinstance(engine, CachedEngine):
        engine.scheduler.prefix_cache.clear()


async def through_endpoint(
    endpoint: ChatEndpoint, engine: Any, question: str, turns: int, sampling: SamplingParams
) -> tuple[list[float], Calls, list[bool], float]:
    """One conversation through the endpoint from an empty prefix cache: client-side seconds per call, the
    (prompt ids, completion) of each call, which calls continued their sequence, and the process CPU
    seconds it took (every thread: client, server, engine)."""
    clear_cache(engine)
    start = SessionStart("s", question, {}, TOOLS, [])
    chat = chat_format(engine.tokenizer)
    recorder = EpisodeRecorder(engine, chat, NoEnv(), start, {}, sampling, ROLLOUT, HARNESS)
    key = endpoint.register(recorder)
    cpu = time.process_time()
    seconds = await asyncio.to_thread(conversation, endpoint.base_url, key, turns, question)
    cpu = time.process_time() - cpu
    endpoint.unregister(key)
    calls = [(c.prompt_ids, c.completion) for c in recorder.calls]
    return seconds, calls, [c.continued for c in recorder.calls], cpu


async def through_engine(
    engine: CachedEngine, calls: Calls, sampling: SamplingParams
) -> tuple[list[float], bool, float]:
    """The same prompts fed to `engine.generate` alone from an empty prefix cache: seconds per call, whether
    every completion came out identical, and the process CPU seconds."""
    clear_cache(engine)
    seconds, identical = [], True
    cpu = time.process_time()
    for prompt, recorded in calls:
        started = time.perf_counter()
        completion = await engine.generate(prompt, sampling)
        seconds.append(time.perf_counter() - started)
        identical &= completion.token_ids == recorded.token_ids
    return seconds, identical, time.process_time() - cpu


async def paired(
    engine: CachedEngine, questions: list[str], turns: int, sampling: SamplingParams
) -> dict[str, Any]:
    """A recording pass through the endpoint (also the warm-up), then each conversation through the endpoint
    and through the engine alone back to back, alternating which goes first; then the conversations once
    more through the endpoint over a `ReplayEngine` (the endpoint's cost alone)."""
    out: dict[str, Any] = {"endpoint_s": [], "engine_s": [], "continued": [], "identical": True, "same": 0}
    out |= {"endpoint_cpu_s": 0.0, "engine_cpu_s": 0.0, "replay_s": [], "replay_cpu_s": 0.0}
    async with ChatEndpoint(HARNESS) as endpoint:
        recorded = [(await through_endpoint(endpoint, engine, q, turns, sampling))[1] for q in questions]
        for index, (question, calls) in enumerate(zip(questions, recorded, strict=True)):
            if index % 2:
                alone, same, alone_cpu = await through_engine(engine, calls, sampling)
                served, served_calls, flags, served_cpu = await through_endpoint(
                    endpoint, engine, question, turns, sampling
                )
            else:
                served, served_calls, flags, served_cpu = await through_endpoint(
                    endpoint, engine, question, turns, sampling
                )
                alone, same, alone_cpu = await through_engine(engine, calls, sampling)
            same_tokens = [c.token_ids for _, c in served_calls] == [c.token_ids for _, c in calls]
            out["identical"] &= same and same_tokens
            out["same"] += sum(a == b for (_, a), (_, b) in zip(served_calls, calls, strict=True))
            out["endpoint_s"] += served
            out["engine_s"] += alone
            out["continued"] += flags
            out["endpoint_cpu_s"] += served_cpu
            out["engine_cpu_s"] += alone_cpu
        replay = ReplayEngine(engine.tokenizer, recorded)
        for question in questions:
            seconds, _, _, cpu = await through_endpoint(endpoint, replay, question, turns, sampling)
            out["replay_s"] += seconds
            out["replay_cpu_s"] += cpu
    out["calls"] = recorded
    return out


async def start_stop_seconds(repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        async with ChatEndpoint():
            pass
    return (time.perf_counter() - started) / repeats


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer = load_model(ModelConfig(name=args.model))
    engine = CachedEngine(model, tokenizer, CachedEngineConfig())
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_tokens)
    questions = [
        f"Guess the number between 1 and 100 (game {index + 1})." for index in range(args.conversations)
    ]
    measured = await paired(engine, questions, args.turns, sampling)
    await engine.aclose()
    endpoint_s, engine_s, calls = measured["endpoint_s"], measured["engine_s"], measured["calls"]
    continued, identical = measured["continued"], measured["identical"]
    ratios = [e / g for e, g in zip(endpoint_s, engine_s, strict=True)]
    overheads = [(e - g) * 1000 for e, g in zip(endpoint_s, engine_s, strict=True)]
    completion_tokens = [len(c.token_ids) for conversation_calls in calls for _, c in conversation_calls]
    return {
        "model": args.model,
        "engine": "cached",
        "max_new_tokens": args.max_tokens,
        "conversations": args.conversations,
        "turns": args.turns,
        "calls": len(engine_s),
        "completion_tokens_mean": statistics.mean(completion_tokens),
        "prompt_tokens_mean": statistics.mean(len(p) for cc in calls for p, _ in cc),
        "continued_calls": sum(continued),
        "completions_identical": identical,
        "identical_endpoint_calls": measured["same"],
        "engine_ms_median": statistics.median(engine_s) * 1000,
        "endpoint_ms_median": statistics.median(endpoint_s) * 1000,
        "overhead_ms_median": statistics.median(overheads),
        "overhead_ms_mean": statistics.mean(overheads),
        "ratio_median": statistics.median(ratios),
        "ratio_of_means": statistics.mean(endpoint_s) / statistics.mean(engine_s),
        "engine_cpu_ms_per_call": measured["engine_cpu_s"] / len(engine_s) * 1000,
        "endpoint_cpu_ms_per_call": measured["endpoint_cpu_s"] / len(endpoint_s) * 1000,
        "cpu_ratio": measured["endpoint_cpu_s"] / measured["engine_cpu_s"],
        "endpoint_only_ms_median": statistics.median(measured["replay_s"]) * 1000,
        "endpoint_only_cpu_ms_per_call": measured["replay_cpu_s"] / len(measured["replay_s"]) * 1000,
        "ratio_engine_plus_endpoint_only": (
            statistics.median(engine_s) + statistics.median(measured["replay_s"])
        )
        / statistics.median(engine_s),
        "endpoint_start_stop_ms": await start_stop_seconds(5) * 1000,
        "load_average_1m": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="2 conversations of 2 calls")
    harness.add_out_argument(parser, "harness_endpoint")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.turns = 2, 2
    result = asyncio.run(run(args))
    baseline = "engine.generate alone on the endpoint's own prompts, back to back with it in this run"
    harness.emit(
        "harness_endpoint", result, baseline=baseline, out=harness.out_path(args, "harness_endpoint")
    )


if __name__ == "__main__":
    main()
