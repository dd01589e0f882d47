"""Benchmark of the shared-prefix update against the unshared one on SmolLM2-135M; prints ONE JSON object.

    .venv/bin/python bench/shared_prefix.py              # calc: a group of 6, maze: a group of 4; ABBA once
    .venv/bin/python bench/shared_prefix.py --groups 2 --rounds 2    # two groups per update, ABBA twice
    .venv/bin/python bench/shared_prefix.py --out -      # printed only (`--no-write` the same)

The episodes are built from the envs' real prompts, token for token as the runner lays them out: the first
prompt is `render_first_prompt` of the env's tools, few-shot examples and a real task's first observation
(calc: ~620 tokens, maze: ~670), each later turn appends an end-of-turn and a real observation
(`render_observation_delta`; maze observations come from playing the moves in the env). Completions are
tool calls written out and tokenised (calc: some words then a `python` call, then `submit`; maze: one `move`
per turn), of varying length and turn count per member, so suffixes differ as in a real group. Log-probs
and advantages are synthetic: they do not change the cost.

Each workload times `ppo_update` (forward, log-probs, loss, backward, clipping, AdamW) over the same samples
with `update.shared_prefix` on and off, in ABBA order after one warm-up of each, on one model (lr 0: the
weights stay put, so both see the same model). Keys per workload: `episodes`, `group_size`,
`micro_batch_size` (the task config's), `shared_tokens` (mean prefix run once per pack), `tokens` (the
episodes' tokens, what an unshared update runs before padding), `distinct_tokens` (what a shared update
runs), `shared_update_s` / `unshared_update_s` (median of the timed updates), `*_tokens_per_s` (`tokens`
over that time, so their ratio is the `speedup`), `max_metric_rel_diff` (the two updates' metrics under the
update's precision). Top level: `threads` (2), `precision`, `cpu_flags` (amx_bf16 / avx512_bf16 found),
`load_avg_1m` at the start and end. Results go to bench/results/shared_prefix.json too (`--out`).

What this is not: a test of equality (tests/integration/test_shared_prefix.py checks it in fp32) or a
sampling benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import harness
import torch
from agentrl_calc.env import CalcEnv
from agentrl_maze.env import MazeEnv
from transformers import PreTrainedTokenizerBase

from agentrl.agent.parsing import format_tool_call
from agentrl.agent.prompting import end_of_turn_text, render_first_prompt, render_observation_delta
from agentrl.cpu import native_cpu_bf16, speed_flags
from agentrl.model_config import ModelConfig
from agentrl.models import load_model
from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import TrainSample, episode_to_sample, plan_packs
from agentrl.trainer.update import ppo_update
from agentrl.types import Action, Episode, ToolCall, Turn

ROOT = Path(__file__).resolve().parents[1]
FILLER = "Let me work this out carefully, one step at a time, and check the result before I answer. "


def completion(tokenizer: PreTrainedTokenizerBase, words: int, call: ToolCall, budget: int) -> list[int]:
    """A sampled turn: `words` words of thought, the tool call, the end-of-turn token; cut at `budget`."""
    text = " ".join(FILLER.split()[:words]) + "\n" + format_tool_call(call) + end_of_turn_text(tokenizer)
    return list(tokenizer.encode(text, add_special_tokens=False))[:budget]


def turn(index: int, prompt: Sequence[int], sampled: Sequence[int], rng: random.Random) -> Turn:
    logprobs = tuple(-rng.uniform(0.05, 2.0) for _ in sampled)
    return Turn(index, tuple(prompt), tuple(sampled), logprobs, "", Action(""), "", 0.0, False, None)


def calc_group(
    tokenizer: PreTrainedTokenizerBase, task: dict[str, Any], size: int, seed: int
) -> list[Episode]:
    """`size` calc episodes of one task: 1-3 `python` calls of varying length, then `submit`."""
    env = CalcEnv()
    observation, _ = env.reset(options={"task": task})
    first = render_first_prompt(tokenizer, env.tools, env.examples, observation)
    expression = str(task["question"]).removeprefix("What is ").removesuffix("?")
    episodes = []
    for member in range(size):
        rng = random.Random(seed * 100 + member)
        turns, prompt = [], first
        for index in range(rng.randint(1, 3)):
            code = f"print({expression})" if index == 0 else f"x = {expression}\nprint(x, x % 7)"
            sampled = completion(tokenizer, rng.randint(4, 18), ToolCall("python", {"code": code}), 48)
            turns.append(turn(index, prompt, sampled, rng))
            prompt = render_observation_delta(tokenizer, f"{task['answer']}\n", completion_ended=True)
        submit = completion(tokenizer, rng.randint(0, 6), ToolCall("submit", {"answer": task["answer"]}), 48)
        turns.append(turn(len(turns), prompt, submit, rng))
        episodes.append(
            Episode(f"c{seed}-{member}", "calc", task["id"], f"calc-{seed}", 0, tuple(turns), "terminated")
        )
    return episodes


def maze_group(
    tokenizer: PreTrainedTokenizerBase, task: dict[str, Any], size: int, seed: int
) -> list[Episode]:
    """`size` maze episodes of one layout: random moves played in the env until the goal or 10 moves."""
    episodes = []
    for member in range(size):
        rng = random.Random(seed * 100 + member)
        env = MazeEnv(max_steps=10)
        observation, _ = env.reset(options={"task": task})
        prompt = render_first_prompt(tokenizer, env.tools, env.examples, observation)
        turns: list[Turn] = []
        done = False
        while not done:
            call = ToolCall("move", {"direction": rng.choice(["up", "down", "left", "right"])})
            sampled = completion(tokenizer, rng.randint(0, 3), call, 32)
            turns.append(turn(len(turns), prompt, sampled, rng))
            result = env.step(Action("", (call,)))
            done = result.terminated or result.truncated
            prompt = render_observation_delta(tokenizer, result.observation, completion_ended=True)
        episodes.append(
            Episode(f"m{seed}-{member}", "maze", task["id"], f"maze-{seed}", 0, tuple(turns), "terminated")
        )
    return episodes


def samples_of(groups: Sequence[Sequence[Episode]]) -> list[TrainSample]:
    """Concat samples with a nonzero advantage on every turn (members alternate above/below the mean)."""
    out = []
    for group in groups:
        for member, episode in enumerate(group):
            advantage = 1.0 if member % 2 else -1.0
            out.append(episode_to_sample(episode, [advantage] * len(episode.turns), 2048))
    return out


def tasks(path: str, count: int) -> list[dict[str, Any]]:
    lines = (ROOT / path).read_text().splitlines()
    return [json.loads(line) for line in lines[:count]]


def time_ab(
    model: torch.nn.Module, samples: list[TrainSample], update: UpdateConfig, rounds: int
) -> tuple[dict[bool, list[float]], dict[bool, dict[str, float]]]:
    """Seconds per update with shared_prefix on (True) and off (False): one warm-up each, then ABBA rounds."""
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
    seconds: dict[bool, list[float]] = {True: [], False: []}
    metrics: dict[bool, dict[str, float]] = {}

    def once(shared: bool) -> float:
        config = UpdateConfig(**{**update.__dict__, "shared_prefix": shared})
        started = time.perf_counter()
        metrics[shared] = ppo_update(model, optimizer, scheduler, samples, 0, LossConfig(), config)
        return time.perf_counter() - started

    once(True), once(False)
    for _ in range(rounds):
        for shared in (True, False, False, True):
            seconds[shared].append(once(shared))
    return seconds, metrics


def workload(
    name: str,
    model: torch.nn.Module,
    groups: list[list[Episode]],
    micro_batch_size: int,
    bf16: bool,
    rounds: int,
) -> dict[str, Any]:
    samples = samples_of(groups)
    update = UpdateConfig(micro_batch_size=micro_batch_size, autocast_bf16=bf16)
    packs = plan_packs(samples, micro_batch_size, update.min_shared_tokens)
    packed = {index for pack in packs for index in pack.indices}
    tokens = sum(sample.num_tokens for sample in samples)
    distinct = tokens - sum(pack.shared * (len(pack.indices) - 1) for pack in packs)
    with contextlib.redirect_stdout(sys.stderr):
        seconds, metrics = time_ab(model, samples, update, rounds)
    shared_s, unshared_s = statistics.median(seconds[True]), statistics.median(seconds[False])
    diffs = [
        abs(metrics[True][key] - value) / max(abs(value), 1e-6)
        for key, value in metrics[False].items()
        if key != "grad_norm"
    ]
    return {
        "workload": name,
        "episodes": len(samples),
        "group_size": len(groups[0]),
        "micro_batch_size": micro_batch_size,
        "packs": len(packs),
        "packed_episodes": len(packed),
        "shared_tokens": round(statistics.mean(pack.shared for pack in packs), 1) if packs else 0,
        "suffix_tokens_mean": round(
            statistics.mean(s.num_tokens for s in samples) - statistics.mean(p.shared for p in packs), 1
        )
        if packs
        else None,
        "tokens": tokens,
        "distinct_tokens": distinct,
        "shared_update_s": round(shared_s, 3),
        "unshared_update_s": round(unshared_s, 3),
        "shared_tokens_per_s": round(tokens / shared_s, 1),
        "unshared_tokens_per_s": round(tokens / unshared_s, 1),
        "speedup": round(unshared_s / shared_s, 2),
        "timed_shared_s": [round(s, 3) for s in seconds[True]],
        "timed_unshared_s": [round(s, 3) for s in seconds[False]],
        "max_metric_rel_diff": round(max(diffs), 6),
        "grad_norm_shared_unshared": [
            round(metrics[True]["grad_norm"], 6),
            round(metrics[False]["grad_norm"], 6),
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1, help="groups (tasks) per update and workload")
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds after the warm-up")
    parser.add_argument("--fp32", action="store_true", help="fp32 instead of bf16 autocast")
    parser.add_argument("--no-write", action="store_true", help="print only (the same as --out -)")
    harness.add_out_argument(parser, "shared_prefix")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    groups, rounds = args.groups, args.rounds
    bf16 = not args.fp32 and native_cpu_bf16()
    flags = speed_flags()
    result: dict[str, Any] = {
        "groups_per_update": groups,
        "abba_rounds": rounds,
        "model": "smollm2-135m-instruct",
        "threads": torch.get_num_threads(),
        "precision": "bf16-autocast" if bf16 else "fp32",
        "cpu_flags": flags,
        "load_avg_1m": os.getloadavg()[0],
    }
    model, tokenizer = load_model(ModelConfig(name="smollm2-135m-instruct"))
    builders: list[tuple[str, Callable[..., list[Episode]], str, int, int]] = [
        ("calc", calc_group, "tasks/calc/train.jsonl", 6, 4),  # configs/calc.yaml: group 6, micro batch 4
        ("maze", maze_group, "tasks/maze/level1/train.jsonl", 4, 2),  # configs/maze.yaml: micro batch 2
    ]
    result["workloads"] = []
    for name, build, path, size, micro in builders:
        built = [build(tokenizer, task, size, seed) for seed, task in enumerate(tasks(path, groups))]
        result["workloads"].append(workload(name, model, built, micro, bf16, rounds))
    result["load_avg_1m_end"] = os.getloadavg()[0]
    out = None if args.no_write else harness.out_path(args, "shared_prefix")
    baseline = "the unshared update (update.shared_prefix=false) on the same samples, ABBA in this run"
    harness.emit("shared_prefix", result, baseline=baseline, out=out, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
