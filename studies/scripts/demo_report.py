"""docs/benchmarks.md's demo table, made from the committed evidence files of `make demo` runs (never typed).

    .venv/bin/python studies/scripts/demo_report.py               # print the table (or say it is pending)
    .venv/bin/python studies/scripts/demo_report.py --write-docs  # rewrite docs/benchmarks.md's marked block

What this is: the reader of `studies/calc-demo/results/demo/*.json` (each written by `agentrl.evidence` at the
end of a `make demo` run: per-task outcomes before and after training, at the evaluation temperature, plus the
optional low-temperature control). The headline is the across-seed band: the mean per-seed change of
held-out success with a 95% Student-t band over seeds (a seed-level statistic: the same base model scored
15-27 of 48 across runs, more spread than per-run tests assume). Per-run exact McNemar p-values come second.
The control columns show the base and the trained model at the control temperature (0.3) on the same
tasks: if RL only sharpened the sampling distribution, the trained model gains nothing there.

What this is not: a place for numbers without a file. With no evidence files it says the table is pending.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl import evidence

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "studies" / "calc-demo" / "results" / "demo"
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- demo-table:start (studies/scripts/demo_report.py) -->", "<!-- demo-table:end -->"
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p: the binomial(gained + lost, 1/2) tail of the smaller count, doubled."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def band(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): a two-sided 95% Student-t band; one value gives a zero-width band."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T95.get(len(values) - 1, 1.96) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def evaluation(record: Mapping[str, Any], label: str) -> Mapping[str, Any] | None:
    return next((e for e in record["evaluations"] if e["label"] == label), None)


def fraction(found: Mapping[str, Any] | None) -> str:
    if found is None:
        return "not measured"
    return f"{found['successes']}/{found['tasks']} ({found['successes'] / max(1, found['tasks']):.3f})"


def change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> float | None:
    """after's success rate minus before's, None when either evaluation is missing or empty; pure."""
    if not before or not after or not before["tasks"] or not after["tasks"]:
        return None
    return float(after["successes"] / after["tasks"] - before["successes"] / before["tasks"])


def run_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """One run's numbers: before/after at the evaluation temperature, gained/lost, McNemar p, control."""
    pairs = [row for row in record["per_task"] if row["before"] is not None and row["after"] is not None]
    gained = sum(1 for row in pairs if row["after"] and not row["before"])
    lost = sum(1 for row in pairs if row["before"] and not row["after"])
    before, after = evaluation(record, "before"), evaluation(record, "after")
    return {
        "seed": record["seeds"]["train"],
        "run": record["run"],
        "commit": record["commit"][:7],
        "temperature": record["temperature"]["eval"],
        "before": fraction(before),
        "after": fraction(after),
        "change": change(before, after),
        "gained": gained,
        "lost": lost,
        "p": mcnemar_exact(gained, lost),
        "control_change": change(evaluation(record, "control_before"), evaluation(record, "control_after")),
        "control_before": fraction(evaluation(record, "control_before")),
        "control_after": fraction(evaluation(record, "control_after")),
        "control_temperature": next(
            (e["temperature"] for e in record["evaluations"] if e["label"] == "control_before"), None
        ),
    }


def load_records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def table(records: Sequence[Mapping[str, Any]], folder: Path = EVIDENCE) -> str:
    """The markdown block: the headline band, then one row per run; or the pending note."""
    where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    if not records:
        return (
            f"No demo evidence files under `{where}/` yet: the table is pending. Each `make demo` run "
            "writes one (`agentrl.evidence`); commit it and run "
            "`studies/scripts/demo_report.py --write-docs`."
        )
    rows = sorted((run_row(record) for record in records), key=lambda row: (row["seed"], row["run"]))
    changes = [row["change"] for row in rows if row["change"] is not None]
    mean, low, high = band(changes) if changes else (math.nan, math.nan, math.nan)
    lines = [
        f"**Across seeds**: held-out success changed by {mean:+.3f} on average over {len(changes)} run(s), "
        f"95% t-band over seeds [{low:+.3f}, {high:+.3f}] (files: `{where}/*.json`).",
        "",
        "| seed | run | commit | held-out before | held-out after | gained / lost | exact McNemar p "
        "| control before | control after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    controls = [row["control_change"] for row in rows if row["control_change"] is not None]
    if controls:
        c_mean, c_low, c_high = band(controls)
        measured = {row["control_temperature"] for row in rows if row["control_change"] is not None}
        temperatures = ", ".join(map(str, sorted(measured)))
        lines[1:1] = [
            "",
            f"**Sharpening control** (the base and the trained model at T={temperatures} "
            f"on the same tasks): success changed by {c_mean:+.3f} on average over {len(controls)} run(s), "
            f"95% t-band over seeds [{c_low:+.3f}, {c_high:+.3f}].",
        ]
    for row in rows:
        control_t = "" if row["control_temperature"] is None else f" (T={row['control_temperature']})"
        lines.append(
            f"| {row['seed']} | {row['run']} | {row['commit']} | {row['before']} (T={row['temperature']}) "
            f"| {row['after']} | {row['gained']} / {row['lost']} | {row['p']:.3g} "
            f"| {row['control_before']}{control_t} | {row['control_after']} |"
        )
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """`text` with the page's demo block replaced by `block` (markers kept)."""
    return evidence.replace_block(text, block, START, END, str(PAGE))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the demo table from the committed evidence files")
    parser.add_argument("--folder", type=Path, default=EVIDENCE, help="the evidence files' folder")
    parser.add_argument("--write-docs", action="store_true", help="rewrite docs/benchmarks.md's demo block")
    args = parser.parse_args(argv)
    block = table(load_records(args.folder), args.folder)
    if args.write_docs:
        PAGE.write_text(replace_block(PAGE.read_text(), block))
    print(block, file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
