"""Cold start, measured: valid-turn rate and held-out success of the base model, after SFT on scripted
demonstrations, and after a short RL run from the SFT model, on the same held-out tasks and sampler seed.

What this is: the two-command recipe of docs/cold_start.md run through the CLI for one env, plus the RL run
from its output, each command's wall time, and a summary read back from the runs' metrics.jsonl:

    agentrl demos --task T --policy scripted --n N name=cold-T-demos ...
    agentrl sft   --task T --demos runs/.../demos.jsonl name=cold-T-sft ...     # held-out eval before (base)
                                                                                  # and after (SFT)
    agentrl train --task T model.name=runs/.../cold-T-sft/final name=cold-T-rl eval.before=false ...

Every evaluation is `agentrl.trainer.run.evaluate`: the first `eval.num_tasks` tasks of the held-out split,
sampled at `eval.temperature` with the fixed sampler seed, so base, SFT and SFT+RL see the same tasks and
the same random stream. `--rl-from-base` adds an RL run of the same budget from the base model, the
comparison that says whether the warm start is what gave RL its signal.

    .venv/bin/python studies/scripts/cold_start.py --env maze
    .venv/bin/python studies/scripts/cold_start.py --env search-tools  # needs Docker (the retriever sandbox)
    .venv/bin/python studies/scripts/cold_start.py --env web-shop      # needs Docker (the browser sandbox)
    # each -> studies/cold-start/results/cold_start_<env>.json

Runs go to runs/cold_start/ with their own store (runs/cold_start/store.db); `--reuse` skips the commands an
earlier invocation finished (runs/cold_start/<prefix>-timings.json); `--quick` shrinks every budget (a smoke
run of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
AGENTRL = [sys.executable, "-m", "agentrl.cli.main"]


@dataclass(frozen=True)
class Recipe:
    """One env's cold start: its run config, overrides shared by every command, and the budgets."""

    task: str
    overrides: tuple[str, ...] = ()
    demos: int = 64
    eval_tasks: int = 32
    sft: tuple[str, ...] = ("sft.epochs=2", "sft.batch_size=8", "sft.lr=1e-4")
    rl: tuple[str, ...] = ()
    needs_docker: bool = False
    notes: list[str] = field(default_factory=list)


LOW_MEMORY = ("engine.cached.max_batch=8", "engine.cached.max_cached_tokens=8192")
"""Overrides that keep each process's peak memory low (fewer sequences decoded at once, a smaller prefix
cache; with small micro batches below): the machine the results were measured on was shared with other jobs.
They change speed and, through batching, the sampled random stream; not what is measured."""

RECIPES = {
    "maze": Recipe(
        "maze",
        overrides=(*LOW_MEMORY, "update.micro_batch_size=1"),
        eval_tasks=16,
        sft=("sft.epochs=1", "sft.batch_size=8", "sft.lr=1e-4"),
        rl=("train.steps=2",),
        notes=[
            "budgets cut to fit a shared, loaded 2-core CPU: 16 held-out tasks, 1 SFT epoch, 2 RL steps",
            "update.micro_batch_size=1: with 2 (shared-prefix packs of up to 5 demonstrations) one SFT "
            "process reached 6.6 GB RSS with its cached engine; the update alone peaked at 4.9 GB",
        ],
    ),
    "search-tools": Recipe(
        "search",
        overrides=("env.kwargs.format=tools", *LOW_MEMORY, "update.micro_batch_size=1"),
        demos=48,
        eval_tasks=16,
        sft=("sft.epochs=1", "sft.batch_size=8", "sft.lr=1e-4"),
        rl=("train.steps=2",),
        needs_docker=True,
        notes=["budgets cut to fit a shared, loaded 2-core CPU: 16 held-out tasks, 1 SFT epoch, 2 RL steps"],
    ),
    "web-shop": Recipe(
        "web-shop",
        overrides=(*LOW_MEMORY, "update.micro_batch_size=1"),
        demos=48,
        eval_tasks=20,
        sft=("sft.epochs=1", "sft.batch_size=8", "sft.lr=1e-4"),
        rl=("train.steps=2",),
        needs_docker=True,
        notes=["budgets cut to fit a shared 2-core CPU: 20 held-out tasks, 1 SFT epoch, 2 RL steps"],
    ),
    "calc": Recipe("calc", overrides=(*LOW_MEMORY, "update.micro_batch_size=2"), needs_docker=True),
    "web-miniwob": Recipe(
        "web-miniwob", overrides=(*LOW_MEMORY, "update.micro_batch_size=2"), eval_tasks=20, needs_docker=True
    ),
}


def run(args: list[str], log: Path) -> float:
    """Run one agentrl command (output to `log`); its wall seconds. A failure stops the benchmark."""
    started = time.perf_counter()
    print("$ agentrl " + " ".join(args), flush=True)
    with log.open("w") as handle:
        result = subprocess.run(
            AGENTRL + args, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, check=False
        )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"agentrl {args[0]} failed ({result.returncode}); see {log}")
    return seconds


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def evals(rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Held-out results by step: success, valid-turn rate (1 - invalid), episodes."""
    out = {}
    for row in rows:
        if "eval/success_rate" in row:
            out[row["step"]] = {
                "success_rate": row["eval/success_rate"],
                "valid_turn_rate": round(1.0 - row.get("eval/invalid_turn_rate", 0.0), 6),
                "mean_reward": row["eval/mean_reward"],
                "episodes": int(row["eval/episodes"]),
                "infra_failures": int(row["eval/infra_failures"]),
            }
    return out


def training_curve(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, float]]:
    return [
        {"step": row["step"], **{key: row[key] for key in keys if key in row}}
        for row in rows
        if any(key in row for key in keys) and "eval/success_rate" not in row
    ]


def measure(
    name: str, recipe: Recipe, quick: bool, rl_from_base: bool, reuse: bool, skip_rl: bool = False
) -> dict[str, Any]:
    runs = ROOT / "runs" / "cold_start"
    runs.mkdir(parents=True, exist_ok=True)
    prefix = f"cold-{name}{'-quick' if quick else ''}"
    eval_tasks = 2 if quick else recipe.eval_tasks
    shared = [
        *recipe.overrides,
        f"runs_dir={runs}",
        f"store.url=sqlite:///{runs / 'store.db'}",
        f"eval.num_tasks={eval_tasks}",
    ]
    short = ["rollout.max_turns=2"] if quick else []  # the evaluations' and RL's; demos need whole episodes
    tiny_rl = ("train.steps=1", "train.tasks_per_step=1", "train.group_size=2")
    demos_dir, sft_dir, rl_dir = (runs / f"{prefix}-{kind}" for kind in ("demos", "sft", "rl"))
    commands: dict[str, list[str]] = {
        "demos": [
            "demos", "--task", recipe.task, "--policy", "scripted", "--n", str(4 if quick else recipe.demos),
            f"name={demos_dir.name}", *shared,
        ],
        "sft": [
            "sft", "--task", recipe.task, "--demos", str(demos_dir / "demos.jsonl"), f"name={sft_dir.name}",
            *(("sft.epochs=1", "sft.batch_size=4") if quick else recipe.sft), *shared, *short,
        ],
        "rl": [
            "train", "--task", recipe.task, f"model.name={sft_dir / 'final'}", f"name={rl_dir.name}",
            "eval.before=false", *(tiny_rl if quick else recipe.rl), *shared, *short,
        ],
    }  # fmt: skip
    if skip_rl:  # base and SFT only (the RL run does not fit the time at hand)
        del commands["rl"]
    if rl_from_base:
        commands["rl_base"] = [
            "train", "--task", recipe.task, f"name={prefix}-rl-base", "eval.before=false",
            *(tiny_rl if quick else recipe.rl), *shared, *short,
        ]  # fmt: skip
    load_before = os.getloadavg()
    timings_file = runs / f"{prefix}-timings.json"
    timings = json.loads(timings_file.read_text()) if reuse and timings_file.is_file() else {}
    for kind, args in commands.items():
        if kind not in timings:  # --reuse: a command that finished before is not run again
            timings[kind] = round(run(args, runs / f"{prefix}-{kind}.log"), 1)
            timings_file.write_text(json.dumps(timings))
    demos_manifest = json.loads((demos_dir / "demos.json").read_text())
    sft_rows, rl_rows = metrics_rows(sft_dir), [] if skip_rl else metrics_rows(rl_dir)
    sft_evals, rl_evals = evals(sft_rows), evals(rl_rows)
    results = {"base": sft_evals[0], "sft": sft_evals[max(sft_evals)]}
    if rl_evals:
        results["sft_rl"] = rl_evals[max(rl_evals)]
    rl_keys = (
        "success_rate", "invalid_turn_rate", "reward_mean", "trained_episodes", "zero_variance_groups",
        "update_s",
    )  # fmt: skip
    curves = {"rl_training": training_curve(rl_rows, rl_keys)}
    if rl_from_base:
        base_rows = metrics_rows(runs / f"{prefix}-rl-base")
        base_evals = evals(base_rows)
        results["base_rl"] = base_evals[max(base_evals)]
        curves["rl_from_base_training"] = training_curve(base_rows, rl_keys)
    return {
        "env": name,
        "task": recipe.task,
        "quick": quick,
        "commands": {kind: "agentrl " + " ".join(args) for kind, args in commands.items()},
        "held_out": {
            "split": "heldout",
            "tasks": eval_tasks,
            "sampler_seed": 0,
            "same_for_every_model": True,
        },
        "results": results,
        "demos": {
            "kept": demos_manifest["episodes"],
            "distinct_tasks": len(demos_manifest["task_ids"]),
            **{k.removeprefix("demos/"): v for k, v in demos_manifest["metrics"].items()},
        },
        "sft_training": training_curve(sft_rows, ("nll", "token_accuracy", "grad_norm", "update_s")),
        **curves,
        "timings_s": timings,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": list(os.getloadavg())},
        "notes": recipe.notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(RECIPES), default="maze")
    parser.add_argument(
        "--quick", action="store_true", help="tiny budgets: checks the script, measures nothing"
    )
    parser.add_argument(
        "--rl-from-base", action="store_true", help="also RL from the base model, same budget"
    )
    parser.add_argument(
        "--out", type=Path, help="default: studies/cold-start/results/cold_start_<env>[_quick].json"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="skip the commands an earlier run of it finished"
    )
    parser.add_argument("--skip-rl", action="store_true", help="base and after SFT only: no RL run")
    args = parser.parse_args(argv)
    recipe = RECIPES[args.env]
    out = (
        args.out
        or ROOT
        / "studies"
        / "cold-start"
        / "results"
        / f"cold_start_{args.env}{'_quick' if args.quick else ''}.json"
    )
    result = measure(args.env, recipe, args.quick, args.rl_from_base, args.reuse, args.skip_rl)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for model, row in result["results"].items():
        print(
            f"{args.env:13s} {model:7s} success {row['success_rate']:.3f}  "
            f"valid turns {row['valid_turn_rate']:.3f}  ({row['episodes']} held-out episodes)"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
