"""Context policies measured (issue 51; the plan is docs/context.md, "Measurements"): how far an episode gets
under each policy, and what the update pays for its samples.

    .venv/bin/python bench/context_policies.py                 # -> bench/results/context_policies.json
    .venv/bin/python bench/context_policies.py --tasks 2 --calc-tasks 2 --out /tmp/pilot.json

What this is: for each policy (`full`; `window` and `mask` with `keep_turns` 2; `summary` due at 3/4 of the
context):
1. **swebench-local, turns reached**: the held-out tasks played with `rollout.max_turns` 16 (and
   `env.kwargs.max_steps` 16) at `rollout.max_context_tokens` 2,048 and 4,096, by two agents: the env's
   scripted policy after an exploration prefix (`explore_then_fix`: list the tree, read the file whole, grep
   its definitions and the imports, list every Python file, then the gold-patch script), and
   SmolLM2-135M-Instruct at the config's temperature (seeded per request, as held-out evaluation plays).
   Per cell: the env turns each episode reached (summary turns counted apart), its stop reason, the share
   stopped by `max_tokens`, and the token segments per episode.
2. **The update's cost**: the SmolLM2 episodes (the first `--update-episodes` of swebench-local at 4,096,
   and calc-chain train chains at T=0.5) made into the trainer's samples (`episode_to_samples`, one per
   segment; advantage 1 on every turn), then one PPO update over them (`ppo_update`, the task config's update
   settings with micro batches of 2 samples, so that four 4,000-token samples' logits never sit in memory
   at once; a warm-up update first): samples, tokens (all, and sampled) and update seconds, per episode.

What this is not: a learning comparison (nothing here trains for more than the timed update), or the
calc-chain per-part success table (`bench/calc_chain_gonogo.py` with and without
`rollout.context.policy=window`, docs/context.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import harness
import torch

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.rollout import episode_seed, run_concurrently, run_episode
from agentrl.agent.rollout_config import SUMMARY_INSTRUCTION
from agentrl.config import RunConfig, load_config
from agentrl.cpu import cpu_flags
from agentrl.demos import ScriptedPlay, end_of_turn_id, scripted_completion
from agentrl.env.scripted import ScriptedTurn, scripted_policy_of
from agentrl.evidence import commit_of
from agentrl.memory import choose_allocator
from agentrl.models import load_model
from agentrl.tasks import load_tasks
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.run import open_run, pad_id, play_heldout
from agentrl.trainer.samples import TrainSample, episode_to_samples
from agentrl.trainer.update import ppo_update
from agentrl.types import Episode

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "the full policy (the whole episode in one context), same run"
OUT = ROOT / "bench" / "results" / "context_policies.json"
FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
POLICIES: dict[str, list[str]] = {
    "full": [],
    "window": ["rollout.context.policy=window", "rollout.context.keep_turns=2"],
    "mask": ["rollout.context.policy=mask", "rollout.context.keep_turns=2"],
    "summary": [
        "rollout.context.policy=summary"
    ],  # summary_at_tokens: 3/4 of the context (`policy_overrides`)
}
CONTEXTS = (2048, 4096)
SWEBENCH = ["rollout.max_turns=16", "env.kwargs.max_steps=16", "env.kwargs.pool_size=2"]
UPDATE_CONTEXT = 4096


def policy_overrides(policy: str, context: int) -> list[str]:
    """The config overrides of `policy` at `max_context_tokens` = `context`; a summary is due at 3/4 of it."""
    extra = [f"rollout.context.summary_at_tokens={context * 3 // 4}"] if policy == "summary" else []
    return [*POLICIES[policy], *extra, f"rollout.max_context_tokens={context}"]


def explore_then_fix(
    task: Mapping[str, Any], observation: str, env_kwargs: Mapping[str, Any]
) -> Generator[ScriptedTurn, str, None]:
    """What an agent does before it edits: look around (the tree, the file whole, its definitions, the
    imports, every Python file), then the env's gold-patch script (view and replace each hunk, submit)."""
    gold = scripted_policy_of("agentrl/SWEBench-v0")
    assert gold is not None
    path = first_patched_path(str(task.get("patch") or ""))
    yield tool_call("bash", command="ls -R | head -120")
    yield tool_call("view", path=path, start=1, end=-1)
    yield tool_call("bash", command=f"grep -n 'def \\|class ' {path} | head -80")
    yield tool_call("bash", command="grep -rn '^import\\|^from' --include=*.py . | head -60")
    yield tool_call("bash", command="find . -name '*.py' | head -80")
    script = gold(task, observation, env_kwargs)
    turn = next(script)
    while True:
        result = yield turn
        try:
            turn = script.send(result)
        except StopIteration:
            return


def first_patched_path(patch: str) -> str:
    """The first file a unified diff changes ("b/<path>" of its first "+++" line)."""
    for line in patch.splitlines():
        if line.startswith("+++ b/"):
            return line.removeprefix("+++ b/").strip()
    raise ValueError("the task's patch changes no file")


def tool_call(name: str, **arguments: Any) -> str:
    from agentrl.env import render_tool_call

    return render_tool_call(name, arguments)


def episode_row(episode: Episode) -> dict[str, Any]:
    """What the tables read of one episode."""
    return {
        "task_id": episode.task_id,
        "turns": sum(not turn.is_summary for turn in episode.turns),
        "summary_turns": sum(turn.is_summary for turn in episode.turns),
        "stop_reason": episode.stop_reason,
        "success": episode.success,
        "segments": len({turn.segment for turn in episode.turns}),
        "prompt_tokens_last": len(episode.turns[-1].prompt_ids) if episode.turns else 0,
    }


def cell_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Turns reached and the share stopped by the context budget, over one cell's episodes."""
    played = [row for row in rows if row["stop_reason"] != "infra_error"]
    count = max(len(played), 1)
    return {
        "episodes": len(rows),
        "infra_failures": len(rows) - len(played),
        "turns_mean": sum(row["turns"] for row in played) / count,
        "turns_max": max((row["turns"] for row in played), default=0),
        "max_tokens_share": sum(row["stop_reason"] == "max_tokens" for row in played) / count,
        "success_share": sum(bool(row["success"]) for row in played) / count,
        "segments_mean": sum(row["segments"] for row in played) / count,
        "summary_turns_mean": sum(row["summary_turns"] for row in played) / count,
    }


class SummarisingPlay(ScriptedPlay):
    """`ScriptedPlay` that answers a summary request (`rollout.context.policy=summary`) with
    `SCRIPTED_SUMMARY` instead of its next scripted turn."""

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        if SUMMARY_INSTRUCTION in self.tokenizer.decode(list(prompt_ids[-200:])):
            return scripted_completion(self.tokenizer, SCRIPTED_SUMMARY, params.stop, self.eot_id)
        return await super().generate(prompt_ids, params)


SCRIPTED_SUMMARY = "I listed the repository, read the file with the bug and its definitions; next I fix it."


async def play_scripted(config: RunConfig, ctx: Any, tasks: Sequence[Mapping[str, Any]]) -> list[Episode]:
    """The exploring scripted agent on each task, through the runner's own loop (`ScriptedPlay`; its
    summaries, under the summary policy, are one fixed sentence)."""
    tokenizer = ctx.engine.tokenizer
    eot = end_of_turn_id(tokenizer)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=config.sampling.max_new_tokens)

    async def one(index: int, task: Mapping[str, Any]) -> Episode:
        play = SummarisingPlay(ctx.client, explore_then_fix, config.env.kwargs, tokenizer, eot)
        seed = episode_seed(0, index)
        return await run_episode(play, play, config.env.id, task, seed, f"s{index}", sampling, config.rollout)  # type: ignore[arg-type]

    return await run_concurrently(one(index, task) for index, task in enumerate(tasks))


async def swebench_cells(
    tasks_count: int, contexts: Sequence[int] = CONTEXTS, agents: Sequence[str] = ("scripted", "smollm2")
) -> tuple[list[dict[str, Any]], list[Episode], RunConfig]:
    """Part 1; also the SmolLM2 episodes at `UPDATE_CONTEXT` per policy (for part 2) and the config."""
    base = load_config(
        "swebench", [f"name=context-{time.strftime('%Y%m%d-%H%M%S')}", "runs_dir=runs/context", *SWEBENCH]
    )
    tasks = load_tasks(base.tasks.root, base.tasks.suite, base.tasks.eval_split)[:tasks_count]
    cells: list[dict[str, Any]] = []
    kept: list[Episode] = []
    async with open_run(base, "eval") as ctx:
        for policy in POLICIES:
            for context in contexts:
                config = load_config("swebench", [*SWEBENCH, *policy_overrides(policy, context)])
                run = replace(ctx, config=replace(ctx.config, rollout=config.rollout))
                for agent in agents:
                    started = time.perf_counter()
                    if agent == "scripted":
                        episodes = await play_scripted(run.config, run, tasks)
                    else:
                        sampling = SamplingParams(
                            temperature=base.sampling.temperature, max_new_tokens=base.sampling.max_new_tokens
                        )
                        episodes = await play_heldout(run, tasks, sampling)
                    rows = [episode_row(episode) for episode in episodes]
                    cell = {
                        "task": "swebench-local",
                        "policy": policy,
                        "max_context_tokens": context,
                        "agent": agent,
                    }
                    cells.append(
                        {
                            **cell,
                            **cell_summary(rows),
                            "wall_s": round(time.perf_counter() - started, 1),
                            "per_task": rows,
                        }
                    )
                    print(json.dumps({k: v for k, v in cells[-1].items() if k != "per_task"}), flush=True)
                    if agent == "smollm2" and context == UPDATE_CONTEXT:
                        kept.extend(replace(e, group_id=f"{policy}:{e.group_id}") for e in episodes)
    return cells, kept, base


async def calc_episodes(tasks_count: int) -> tuple[list[Episode], RunConfig]:
    """SmolLM2 on the first calc-chain train chains at T=0.5, per policy, for part 2."""
    base = load_config(
        "calc-chain", [f"name=context-calc-{time.strftime('%Y%m%d-%H%M%S')}", "runs_dir=runs/context"]
    )
    tasks = load_tasks(base.tasks.root, base.tasks.suite, base.tasks.train_split)[:tasks_count]
    kept: list[Episode] = []
    async with open_run(base, "eval") as ctx:
        for policy in POLICIES:
            context = base.rollout.max_context_tokens
            config = load_config("calc-chain", policy_overrides(policy, context))
            run = replace(ctx, config=replace(ctx.config, rollout=config.rollout))
            episodes = await play_heldout(
                run, tasks, SamplingParams(temperature=0.5, max_new_tokens=base.sampling.max_new_tokens)
            )
            kept.extend(replace(e, group_id=f"{policy}:{e.group_id}") for e in episodes)
    return kept, base


def update_cost(
    episodes: Sequence[Episode], config: RunConfig, temperature: float, limit: int
) -> dict[str, Any]:
    """Part 2: per policy, the samples of its first `limit` episodes and one timed PPO update over them."""
    model, tokenizer = load_model(config.model)
    optimizer, scheduler = make_optimizer(model, config.optim)
    policies = sorted({e.group_id.split(":")[0] for e in episodes}, key=list(POLICIES).index)
    by_policy = {
        p: [e for e in episodes if e.group_id.split(":")[0] == p and not e.is_infra_failure][:limit]
        for p in policies
    }

    def samples_of(chosen: Sequence[Episode]) -> list[TrainSample]:
        return [
            sample
            for episode in chosen
            for sample in episode_to_samples(
                episode, [1.0] * len(episode.turns), config.rollout.max_context_tokens
            )
        ]

    def update(samples: list[TrainSample]) -> float:
        started = time.perf_counter()
        ppo_update(
            model,
            optimizer,
            scheduler,
            samples,
            pad_id(tokenizer),
            config.loss,
            replace(config.update, micro_batch_size=2),
            temperature=temperature,
        )
        return time.perf_counter() - started

    update(samples_of(by_policy[policies[0]][:2]))  # warm-up: kernels, allocator, optimiser state
    out: dict[str, Any] = {}
    for policy, chosen in by_policy.items():
        samples = samples_of(chosen)
        seconds = update(samples)
        count = max(len(chosen), 1)
        out[policy] = {
            "episodes": len(chosen),
            "samples_per_episode": len(samples) / count,
            "tokens_per_episode": sum(s.num_tokens for s in samples) / count,
            "sampled_tokens_per_episode": sum(s.num_sampled_tokens for s in samples) / count,
            "update_s_per_episode": seconds / count,
            "update_s": round(seconds, 2),
        }
        print(json.dumps({"policy": policy, **out[policy]}), flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10, help="swebench-local held-out tasks (10 in all)")
    parser.add_argument("--calc-tasks", type=int, default=16, help="calc-chain train chains for part 2")
    parser.add_argument(
        "--update-episodes", type=int, default=4, help="swebench-local episodes per policy in part 2's update"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--update-only",
        action="store_true",
        help="part 2 alone, its episodes played again, into the existing --out (its part 1 kept)",
    )
    args = parser.parse_args(argv)
    choose_allocator()
    torch.manual_seed(0)
    started = time.perf_counter()
    if args.update_only:
        return update_only(args, argv, started)
    cells, swebench_kept, swebench_config = asyncio.run(swebench_cells(args.tasks))
    calc_kept, calc_config = asyncio.run(calc_episodes(args.calc_tasks))
    updates = {
        "swebench-local": update_cost(
            swebench_kept, swebench_config, swebench_config.sampling.temperature, args.update_episodes
        ),
        "calc-chain": update_cost(calc_kept, calc_config, 0.5, args.calc_tasks),
    }
    report = {
        "command": " ".join(["bench/context_policies.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": commit_of(ROOT),
        "cpu_flags": {flag: flag in cpu_flags() for flag in FLAGS},
        "policies": POLICIES,
        "swebench_overrides": SWEBENCH,
        "cells": cells,
        "update": updates,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    harness.emit("context_policies", report, baseline=BASELINE, out=args.out, argv=argv, echo=False)
    return 0


def update_only(args: argparse.Namespace, argv: Sequence[str] | None, started: float) -> int:
    """Part 2 in a run of its own (the machine to itself), its episodes played again as in the full run
    (the same seeds and tasks), written into the `update` of the existing results file."""
    report = json.loads(args.out.read_text())
    report["part1_harness"] = report.pop(harness.RESERVED, None)  # the full run's; this run's is `harness`
    _, swebench_kept, swebench_config = asyncio.run(
        swebench_cells(args.update_episodes, contexts=(UPDATE_CONTEXT,), agents=("smollm2",))
    )
    calc_kept, calc_config = asyncio.run(calc_episodes(args.calc_tasks))
    report["update"] = {
        "swebench-local": update_cost(
            swebench_kept, swebench_config, swebench_config.sampling.temperature, args.update_episodes
        ),
        "calc-chain": update_cost(calc_kept, calc_config, 0.5, args.calc_tasks),
    }
    report["update_run"] = {
        "command": " ".join(["bench/context_policies.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": commit_of(ROOT),
        "cpu_flags": {flag: flag in cpu_flags() for flag in FLAGS},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    harness.emit("context_policies", report, baseline=BASELINE, out=args.out, argv=argv, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
