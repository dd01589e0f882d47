"""The runs table docs/benchmarks.md quotes for plan 3b, made from its kept run files.

    .venv/bin/python bench/plan3b_table.py [bench/results/credit_study_calc_chain_grpo_runs]
    .venv/bin/python bench/plan3b_table.py --write-docs   # docs/benchmarks.md's block: verdict and table

What this is: one row per kept run (the base's evaluations first): per-part success on the held-out chains
at each checkpoint at the training temperature and, at the last one, at the best decoding, with the chains
that gained and lost parts there against the base (the first base evaluation; the two are identical, task
by task). What this is not: the named statistic, which `bench/credit_study.py --kept-only` computes
(`summary.above_base`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import marked_block

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "bench" / "results" / "credit_study_calc_chain_grpo_runs"
REPORT = ROOT / "bench" / "results" / "credit_study_calc_chain_grpo.json"
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- plan3b:start (bench/plan3b_table.py) -->", "<!-- plan3b:end -->"


def rewards(evaluation: Mapping[str, Any]) -> dict[str, float]:
    return {task["task_id"]: float(task["reward"]) for task in evaluation["per_task"]}


def gained_lost(base: Mapping[str, float], after: Mapping[str, float]) -> tuple[int, int]:
    """Chains with more parts right after than before, and with fewer."""
    gained = sum(after[task] > parts for task, parts in base.items())
    lost = sum(after[task] < parts for task, parts in base.items())
    return gained, lost


def table(folder: Path) -> str:
    base = json.loads((folder / "base.json").read_text())["result"]
    base_best = rewards(base["at_best_temperature"])
    rows = [
        "| run | env steps | at the training T | at the best decoding | chains gained / lost there |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(folder.glob("base*.json")):
        point = json.loads(path.read_text())["result"]
        best = point["at_best_temperature"]["per_part_success"]
        rows.append(f"| {path.stem} | 0 | {point['per_part_success']:.3f} | {best:.3f} (T=0) | |")
    for path in sorted(folder.glob("*-seed*.json")):
        result = json.loads(path.read_text())["result"]
        for point in result["curve"]:
            best = point.get("at_best_temperature")
            shown = f"{best['per_part_success']:.3f} (T={best['temperature']:g})" if best else "not evaluated"
            counts = "{} / {}".format(*gained_lost(base_best, rewards(best))) if best else ""
            steps = point["env_steps"]
            rows.append(f"| {path.stem} | {steps:,} | {point['per_part_success']:.3f} | {shown} | {counts} |")
    return "\n".join(rows)


def verdict(report: Mapping[str, Any]) -> str:
    """The named test's outcome (`bench/credit_study.py --kept-only`'s `summary.above_base.grpo`)."""
    above = report["summary"]["above_base"]["grpo"]
    best, trained = above["best_temperature_figures"], above["training_temperature_figures"]
    mean, low, high = best["band"]
    outcome = "lies above it: GRPO beats the base" if above["best_temperature"] else "does not lie above it"
    return (
        f"GRPO on calc-chain, {len(best['seeds'])} seeds, final greedy per-part success {mean:.3f} (95% band "
        f"[{low:.3f}, {high:.3f}]) against the base at its best decoding, greedy, {best['base']:.3f}: "
        "the band "
        f"{outcome} at its best decoding. At the training temperature: {trained['band'][0]:.3f} "
        f"[{trained['band'][1]:.3f}, {trained['band'][2]:.3f}] against {trained['base']:.3f}. "
        "([bench/results/credit_study_calc_chain_grpo.json](bench/results/credit_study_calc_chain_grpo.json))"
    )


def block(folder: Path = KEPT, report: Path = REPORT) -> str:
    return verdict(json.loads(report.read_text())) + "\n\n" + table(folder)


def page_block(folder: Path = KEPT, report: Path = REPORT) -> str:
    """`block` as docs/benchmarks.md quotes it: its links to bench/ made relative to docs/."""
    return block(folder, report).replace("](bench/", "](../bench/")


def replace_block(text: str, made: str) -> str:
    return marked_block.replace_block(text, made, START, END, str(PAGE))


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--write-docs"]:
        PAGE.write_text(replace_block(PAGE.read_text(), page_block()))
        print(f"wrote {PAGE.relative_to(ROOT)}")
        return 0
    print(table(Path(args[0]) if args else KEPT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
