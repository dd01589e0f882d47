"""A run's evidence file: the per-task held-out outcomes behind a before/after claim, read from the store.

    python -m agentrl.evidence runs/demo-20261126-120000 \
        --out studies/calc-demo/results/demo/demo-20261126-120000.json \
        [--control-before runs/<base eval at T=0.3> --control-after runs/<trained eval at T=0.3>]

What this is: `run_evidence`, which turns what a finished run already recorded (its saved `config.yaml` and
the held-out episodes in the run store, split "eval") into one JSON: every evaluation with its sampling
`temperature`, step and per-task outcomes; a top-level `per_task` list pairing each task's outcome before
and after training; the seeds, the commit and the CPU flags. Optional control evaluations (separate `agentrl
eval` runs, e.g. the base and the trained model at a low temperature, the sharpening control of issue 41)
are added as more evaluations. The calc demo's four committed files are the records of the study
`studies/calc-demo` (converted unchanged), whose report makes docs/benchmarks.md's demo table.

Also `replace_block`: the one way the reports (`agentrl study report`, `bench/gpu_report.py`,
`studies/scripts/context_report.py`) rewrite a generated block of a page, between its markers.

What this is not: an evaluation (it runs no model), a statistic (the study's report makes those) or a
template engine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agentrl.config import EvalConfig
from agentrl.cpu import cpu_flags
from agentrl.store.repository import list_runs, load_episodes, open_store

EVIDENCE_VERSION = 1
FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def commit_of(path: Path, only: Sequence[str] = ()) -> str:
    """The commit of the checkout at `path`, "+dirty" when tracked files differ (those under `only`'s paths,
    relative to the checkout's root, when given; "unknown" outside git)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
        ).stdout.strip()
        scope = ["--", *only] if only else []
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", *scope], cwd=path, capture_output=True
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def replace_block(text: str, block: str, start: str, end: str, where: str = "README") -> str:
    """`text` with the part between the markers `start` and `end` replaced by `block`, markers kept; a
    missing marker stops with the file (`where`) and the markers it lacks."""
    if start not in text or end not in text:
        raise SystemExit(f"{where} has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    return head + start + "\n" + block + "\n" + end + rest.split(end, 1)[1]


def evaluations_of(
    episodes: Sequence[Mapping[str, Any]], temperature: float, label: str
) -> list[dict[str, Any]]:
    """One evaluation per step at which the run evaluated held-out tasks, in step order."""
    by_step: dict[int, list[Mapping[str, Any]]] = {}
    for episode in episodes:
        if episode["split"] == "eval":
            by_step.setdefault(int(episode["step"]), []).append(episode)
    return [
        {
            "label": label if len(by_step) == 1 else f"{label}@{step}",
            "step": step,
            "temperature": temperature,
            **outcome_summary(rows),
        }
        for step, rows in sorted(by_step.items())
    ]


def outcome_summary(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-task outcomes (infrastructure failures listed with `success` None) and the success count."""
    per_task = [
        {
            "task_id": episode["task_id"],
            "success": None if episode["error"] else bool(episode["success"]),
            "reward": float(episode["reward"]),
        }
        for episode in episodes
    ]
    scored = [row["success"] for row in per_task if row["success"] is not None]
    return {"tasks": len(scored), "successes": sum(scored), "per_task": per_task}


def read_run(run_dir: Path, store_url: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's saved config and its episodes from the store (found by the run's folder name)."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    store = open_store(store_url or config.get("store", {}).get("url"))
    runs = [run for run in list_runs(store) if run["name"] == run_dir.name]
    if not runs:
        raise SystemExit(f"no run named {run_dir.name!r} in the store; pass --store-url")
    return config, load_episodes(store, runs[0]["id"])


def paired(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each task of `before` with its outcome there and in `after` (None where it was not scored)."""
    later = {row["task_id"]: row["success"] for row in after["per_task"]}
    return [
        {"task_id": r["task_id"], "before": r["success"], "after": later.get(r["task_id"])}
        for r in before["per_task"]
    ]


def run_evidence(
    run_dir: Path, controls: Mapping[str, Path] | None = None, store_url: str | None = None
) -> dict[str, Any]:
    """The evidence record of a finished run (see the module docstring)."""
    config, episodes = read_run(run_dir, store_url)
    temperature = float(config["eval"]["temperature"])
    evaluations = evaluations_of(episodes, temperature, "eval")
    if len(evaluations) >= 2:
        evaluations[0]["label"], evaluations[-1]["label"] = "before", "after"
    for label, control_dir in (controls or {}).items():
        control_config, control_episodes = read_run(control_dir, store_url)
        control_temperature = float(control_config["eval"]["temperature"])
        for evaluation in evaluations_of(control_episodes, control_temperature, label):
            evaluations.append(
                {**evaluation, "run": control_dir.name, "model": control_config["model"]["name"]}
            )
    by_label = {evaluation["label"]: evaluation for evaluation in evaluations}
    return {
        "evidence_version": EVIDENCE_VERSION,
        "run": run_dir.name,
        "task": config.get("task"),
        "commit": commit_of(Path(__file__).resolve().parent),
        "cpu_flags": {flag: flag in cpu_flags() for flag in FLAGS},
        "seeds": {
            "train": config["train"]["seed"],
            "eval_sampler": config["eval"].get("seed", EvalConfig.seed),
            "env": 0,
        },
        "temperature": {"train": config["sampling"]["temperature"], "eval": temperature},
        "estimator": config.get("credit", {}).get("estimator"),
        # the last step trained: the evaluation after training's step (a `train.env_step_budget` can end a
        # run before `train.steps`), else the configured steps
        "train_steps": by_label["after"]["step"] if "after" in by_label else config["train"]["steps"],
        "env_step_budget": config["train"].get("env_step_budget", 0),
        "evaluations": evaluations,
        "per_task": paired(by_label["before"], by_label["after"]) if "after" in by_label else [],
        **(
            {"control_per_task": paired(by_label["control_before"], by_label["control_after"])}
            if {"control_before", "control_after"} <= set(by_label)
            else {}
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a run's evidence JSON (per-task outcomes).")
    parser.add_argument("run_dir", type=Path, help="runs/<name>: the run's folder (its config.yaml)")
    parser.add_argument("--out", type=Path, help="where to write (default: <run_dir>/evidence.json)")
    parser.add_argument("--control-before", type=Path, help="an `agentrl eval` run of the starting model")
    parser.add_argument("--control-after", type=Path, help="an `agentrl eval` run of the trained model")
    parser.add_argument("--store-url", help="the run store (default: the run's own store.url)")
    args = parser.parse_args(argv)
    controls = {
        label: path
        for label, path in (("control_before", args.control_before), ("control_after", args.control_after))
        if path is not None
    }
    record = run_evidence(args.run_dir, controls, args.store_url)
    out = args.out or args.run_dir / "evidence.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
