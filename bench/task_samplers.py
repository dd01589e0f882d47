"""How often each task sampler plays groups that teach nothing (uniform, filtered, adaptive; base model).

    .venv/bin/python bench/task_samplers.py            # maze level 1 and calc, 3 steps each (~25 min)
    .venv/bin/python bench/task_samplers.py --quick    # calc only, 1 tiny step per sampler: a few minutes

For each env config (`configs/maze.yaml`, whose tasks are tasks/maze/level1, and `configs/calc.yaml`) and
each sampler it plays `--steps` training steps through `agentrl.trainer.task_sampling.collect_step` (the
sync loop's entry) with the base SmolLM2-135M-Instruct on the cached engine and no update, so every sampler
sees the same model; the seed (`train.seed`) and step numbers are the same for every sampler, so uniform
and filtered play the same first round. Only the sampler changes.

Per (env, sampler) and step it keeps: zero_variance_groups (fraction of the played groups whose returns are
all equal), trained_zero_variance_groups (the same over the groups a step would train on: the filtered
sampler's fillers), informative_episodes, played_groups, extra_groups_played, posterior_mean_signal,
success_rate, episodes and rollout_s. Results go to `bench/results/task_samplers.json` after every run (a
killed benchmark keeps what it finished); the summary printed at the end holds the means over steps.

What this is not: a training study (no update: the question is which groups the samplers pick for one
policy, not how the policy changes), or a tuning of the samplers' options (their defaults, except
`tasks.filter.budget`, set to 1.0 here to bound the cost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import harness
import numpy as np

from agentrl.config import load_config
from agentrl.memory import choose_allocator
from agentrl.tasks import load_tasks

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLERS = ("uniform", "filtered", "adaptive")
KEPT = (
    "zero_variance_groups",
    "trained_zero_variance_groups",
    "informative_episodes",
    "played_groups",
    "extra_groups_played",
    "filler_groups",
    "posterior_mean_signal",
    "success_rate",
    "episodes",
    "rollout_s",
)


@dataclass(frozen=True)
class BenchConfig:
    """What the benchmark runs; every default lives here."""

    envs: tuple[str, ...] = ("maze", "calc")
    samplers: tuple[str, ...] = SAMPLERS
    steps: int = 3
    seed: int = 0
    overrides: tuple[str, ...] = (
        "train.tasks_per_step=4",
        "train.group_size=4",
        "tasks.filter.budget=1.0",
        "engine.kind=cached",
    )
    runs_dir: str = "runs/task_samplers"
    out: Path = RESULTS / "task_samplers.json"


QUICK = BenchConfig(
    envs=("calc",),
    steps=1,
    overrides=(
        "train.tasks_per_step=2",
        "train.group_size=2",
        "tasks.filter.budget=1.0",
        "engine.kind=cached",
        "sampling.max_new_tokens=32",
        "rollout.max_turns=2",
    ),
    out=RESULTS / "task_samplers_quick.json",
)


async def measure(bench: BenchConfig, env: str, sampler_kind: str) -> list[dict[str, float]]:
    """Play `bench.steps` steps of one (env, sampler) with the base model; the kept metrics per step."""
    # imported here, in the child only: torch comes with them, and `run_child` picks the allocator first (a
    # re-execution under tcmalloc would import them all again); the parent process never needs torch
    from agentrl.trainer.run import open_run, rollout_metrics
    from agentrl.trainer.task_sampling import collect_step, record_sampling, resumed_sampler

    config = load_config(
        env,
        [
            *bench.overrides,
            f"name=samplers-{env}-{sampler_kind}-{time.strftime('%Y%m%d-%H%M%S')}",
            f"runs_dir={bench.runs_dir}",
            f"store.url=sqlite:///{Path(bench.runs_dir).resolve() / 'store.db'}",
            f"tasks.sampler={sampler_kind}",
            f"train.seed={bench.seed}",
            f"train.steps={bench.steps}",
        ],
    )
    rows = []
    async with open_run(config, kind="eval") as ctx:  # no update: the engine samples with the base weights
        train_tasks = load_tasks(config.tasks.root, config.tasks.suite, config.tasks.train_split)
        sampler = resumed_sampler(ctx, train_tasks, resumed=False)
        for step in range(1, bench.steps + 1):
            started = time.perf_counter()
            collected = await collect_step(ctx, sampler, step)
            ctx.writer.record_episodes(ctx.run_id, step, "train", collected.episodes, None)
            record_sampling(ctx, step, collected)
            metrics = {
                **rollout_metrics(collected.played_episodes),
                **collected.metrics,
                "trained_zero_variance_groups": trained_zero_variance(
                    sampler_kind, collected.draws, collected.metrics["zero_variance_groups"]
                ),
                "rollout_s": time.perf_counter() - started,
            }
            rows.append(
                {"step": step, **{key: round(float(metrics[key]), 4) for key in KEPT if key in metrics}}
            )
            print(json.dumps({"env": env, "sampler": sampler_kind, **rows[-1]}), file=sys.stderr, flush=True)
    return rows


def trained_zero_variance(
    sampler_kind: str, draws: Sequence[dict[str, Any]], played_fraction: float
) -> float:
    """Fraction of the trained groups that are zero-variance: the filtered sampler's fillers; for the other
    samplers every played group is trained, so it is the played fraction."""
    if sampler_kind != "filtered":
        return played_fraction
    trained = [d for d in draws if d["reason"] in ("informative", "filler")]
    return sum(d["reason"] == "filler" for d in trained) / len(trained) if trained else 0.0


def summarise_run(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Means over steps of the kept metrics (and totals of the played groups and episodes)."""
    keys = sorted({key for row in rows for key in row if key != "step"})
    means = {
        f"mean_{key}": round(float(np.mean([row[key] for row in rows if key in row])), 4) for key in keys
    }
    return {
        **means,
        "total_played_groups": sum(row.get("played_groups", 0.0) for row in rows),
        "total_episodes": sum(row.get("episodes", 0.0) for row in rows),
    }


def run_child(bench: BenchConfig, env: str, sampler_kind: str, out: Path) -> None:
    """One (env, sampler) in this process; its rows to `out`."""
    choose_allocator()
    rows = asyncio.run(measure(bench, env, sampler_kind))
    out.write_text(json.dumps(rows) + "\n")


def run_bench(bench: BenchConfig) -> dict[str, Any]:
    """Every (env, sampler) in its own process (an engine per run; memory is returned with the process),
    writing the report after each one."""
    started = time.perf_counter()
    report: dict[str, Any] = {
        "config": {**asdict(bench), "out": str(bench.out)},
        "runs": {},
        "summary": {},
    }
    scratch = Path(bench.runs_dir)
    scratch.mkdir(parents=True, exist_ok=True)
    for env in bench.envs:
        for sampler_kind in bench.samplers:
            child_out = scratch / f"{env}-{sampler_kind}.json"
            child = [
                sys.executable,
                __file__,
                "--child",
                f"{env}:{sampler_kind}",
                "--child-out",
                str(child_out),
            ]
            child += ["--child-bench", json.dumps(plain(bench))]
            run_started = time.perf_counter()
            subprocess.run(child, check=True)
            rows = json.loads(child_out.read_text())
            report["runs"].setdefault(env, {})[sampler_kind] = rows
            summary = summarise_run(rows)
            summary["wall_s"] = round(time.perf_counter() - run_started, 1)
            report["summary"].setdefault(env, {})[sampler_kind] = summary
            report["wall_s"] = round(time.perf_counter() - started, 1)
            baseline = "the uniform sampler on the same env, same run"
            harness.emit("task_samplers", report, baseline=baseline, out=bench.out, echo=False)
    return report


def plain(bench: BenchConfig) -> dict[str, Any]:
    fields = asdict(bench)
    return {
        key: list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v
        for key, v in fields.items()
    }


def from_plain(fields: dict[str, Any]) -> BenchConfig:
    converted: dict[str, Any] = {
        key: tuple(v) if isinstance(v, list) else Path(v) if key == "out" else v for key, v in fields.items()
    }
    return BenchConfig(**converted)


def parse_args(argv: Sequence[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="calc only, one tiny step per sampler")
    parser.add_argument("--envs", help="comma-separated config names, e.g. maze,calc")
    parser.add_argument("--samplers", help="comma-separated, e.g. uniform,filtered")
    parser.add_argument("--steps", type=int, help="steps per (env, sampler)")
    parser.add_argument("--out", type=Path, help="JSON path")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # ENV:SAMPLER, one run in this process
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-bench", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")
    args = parser.parse_args(argv)
    if args.child:
        env, sampler_kind = args.child.split(":")
        run_child(from_plain(json.loads(args.child_bench)), env, sampler_kind, args.child_out)
        raise SystemExit(0)
    bench = QUICK if args.quick else BenchConfig()
    changes: dict[str, Any] = {}
    if args.envs:
        changes["envs"] = tuple(name for name in args.envs.split(",") if name)
    if args.samplers:
        changes["samplers"] = tuple(name for name in args.samplers.split(",") if name)
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.out:
        changes["out"] = args.out
        changes["runs_dir"] = str(args.out.with_suffix("")) + "-runs"
    if args.overrides:
        changes["overrides"] = (*bench.overrides, *args.overrides)
    return BenchConfig(**{**asdict(bench), **changes})


def main(argv: Sequence[str] | None = None) -> int:
    bench = parse_args(argv)
    report = run_bench(bench)
    print(
        json.dumps(
            {"summary": report["summary"], "wall_s": report["wall_s"], "out": str(bench.out)}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
