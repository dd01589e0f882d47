"""Go/no-go for the calc-chain study (issue 41, docs/credit_study.md part 3), before any training run.

    .venv/bin/python studies/scripts/calc_chain_gonogo.py
    # -> studies/calc-chain-gonogo/results/calc_chain_gonogo.json
    .venv/bin/python studies/scripts/calc_chain_gonogo.py --tasks 12 --temperatures 0 --no-batch \
        --out /tmp/pilot.json

What this is: two measurements of the base model (SmolLM2-135M-Instruct) on `configs/calc-chain.yaml`:
1. **Per-part success** on the first `--tasks` held-out chains at each of `--temperatures` (greedy = 0, 0.3
   and the training temperature by default), played as `agentrl eval` plays them (`trainer.run.play_heldout`:
   one episode per task with per-request sampler seeds, so the cached engine repeats them exactly), with each
   task's per-part outcomes kept. Results files written before 2026-11-27 03:30 (go/no-gos 1-3) were played
   unseeded (`play_tasks`, sampler seed 0 for torch only): their greedy and sampled evaluations depended on
   batching.
   The study's claim must beat the best of these (`best`), not only the training temperature.
2. **How far GiGPO's per-turn advantages are from GRPO's** on one base batch: one training step's worth of
   groups (`train.tasks_per_step` train chains x `train.group_size` episodes at the training temperature),
   credited by `agentrl.credit.estimate` with each estimator's defaults (what the study runs). Reported: the
   cosine and Pearson correlation of the two per-turn vectors, the share of turns whose sign differs
   (among turns where either is non-zero), and the same for GiGPO's episode term alone (`step_weight=0`),
   so the step term's own contribution is visible. Near-collinear vectors would mean this task cannot
   separate the estimators.
3. **Where a step-level estimator has something per part to compare**, on the same batch
   (`part_start_signal`): at the first turn of each later part every member of a group is in one state
   (the env's state key is the part index, not the answers); of those anchor groups, how many have unequal
   returns to go (the part's and later parts' rewards; earlier parts' luck is already in the past).

What this is not: a training run, or a test of the estimators' code (tests/unit covers that). The engine's
seeded samples depend on what else is in its batch (docs/scaling.md), so a repeat of this script
gives other draws at temperatures above 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from agentrl.config import RunConfig, load_config
from agentrl.cpu import cpu_flags
from agentrl.memory import choose_allocator
from agentrl.study.signal import (  # noqa: F401  (the measures, re-exported for its tests and callers)
    advantage_comparison,
    compare_advantages,
    part_outcomes,
    part_start_signal,
    per_task,
    returns_to_go_at_part_starts,
    success_summary,
)
from agentrl.tasks import load_tasks
from agentrl.trainer.run import EVAL_SEED, open_run, play_heldout, play_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit_study import code_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "studies" / "calc-chain-gonogo" / "results" / "calc_chain_gonogo.json"
FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


async def measure(
    config: RunConfig, temperatures: Sequence[float], tasks: int, batch: bool
) -> dict[str, Any]:
    """Every evaluation, then the base batch, in one run (one model load)."""
    parts = int(config.env.kwargs.get("parts", 1))
    heldout = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.eval_split)[:tasks]
    evaluations, comparison = [], None
    async with open_run(config, kind="eval") as ctx:
        for temperature in temperatures:
            started = time.perf_counter()
            sampling = replace(config.sampling, temperature=temperature)
            episodes = await play_heldout(ctx, heldout, sampling)
            rows = per_task(episodes, heldout, parts)
            summary = success_summary(rows)
            evaluations.append(
                {"temperature": temperature, **summary, "wall_s": round(time.perf_counter() - started, 1)}
            )
            evaluations[-1]["per_task"] = rows
            print(json.dumps({k: v for k, v in evaluations[-1].items() if k != "per_task"}), file=sys.stderr)
        if batch:
            started = time.perf_counter()
            train = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
            torch.manual_seed(EVAL_SEED)
            episodes = await play_tasks(
                ctx, train[: config.train.tasks_per_step], config.train.group_size, config.sampling, seed=0
            )
            comparison = {
                "temperature": config.sampling.temperature,
                "tasks_per_step": config.train.tasks_per_step,
                "group_size": config.train.group_size,
                **advantage_comparison(episodes, parts),
                "wall_s": round(time.perf_counter() - started, 1),
            }
    return {"evaluations": evaluations, "batch": comparison}


def best_decoding(evaluations: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The evaluation with the highest per-part success (the lower temperature on a tie)."""
    if not evaluations:
        return None
    best = max(evaluations, key=lambda e: (e["per_part_success"], -e["temperature"]))
    return {"temperature": best["temperature"], "per_part_success": best["per_part_success"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="calc-chain", help="config name (configs/TASK.yaml)")
    parser.add_argument("--tasks", type=int, default=48, help="held-out tasks per evaluation")
    parser.add_argument("--temperatures", default="0,0.3,0.7", help="comma-separated; 0 decodes greedily")
    parser.add_argument("--no-batch", action="store_true", help="skip the GRPO-vs-GiGPO batch")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = parser.parse_args(argv)
    choose_allocator()
    temperatures = [float(value) for value in args.temperatures.split(",") if value.strip()]
    overrides = [f"name=gonogo-{time.strftime('%Y%m%d-%H%M%S')}", "runs_dir=runs/gonogo", *args.overrides]
    config = load_config(args.task, overrides)
    started = time.perf_counter()
    measured = asyncio.run(measure(config, temperatures, args.tasks, not args.no_batch))
    report = {
        "command": " ".join(
            ["studies/scripts/calc_chain_gonogo.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "commit": code_version(),
        "cpu_flags": {flag: flag in cpu_flags() for flag in FLAGS},
        "task": args.task,
        "overrides": overrides,
        "parts": int(config.env.kwargs.get("parts", 1)),
        "eval_tasks": args.tasks,
        "temperatures": temperatures,
        "engine": config.engine.kind,
        "best": best_decoding(measured["evaluations"]),
        **measured,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    summary = {k: v for k, v in report.items() if k not in ("evaluations", "batch")}
    if report["batch"]:
        summary["batch"] = {k: v for k, v in report["batch"].items() if k != "advantages"}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
