"""The tables docs/context.md and docs/credit_study.md quote for the context policies (issue 51), made from
their committed results files.

    .venv/bin/python studies/scripts/context_report.py               # print the tables
    .venv/bin/python studies/scripts/context_report.py --write-docs  # rewrite both pages' generated blocks

What this is: three tables. (1) calc-chain per-part success of the base model, `full` against `window`
(`studies/context-calc-chain/results/context_calc_chain_{full,window}.json`, written by
`studies/scripts/calc_chain_gonogo.py`), with the largest gap of a later part to part 1 and whether the plan's
target (every part within 0.1 of part 1) holds; (2) swebench-local turns reached and the share stopped by
`max_tokens`, per agent, policy and context size, and (3) the update's samples, tokens and seconds per episode
per policy (both from `bench/results/context_policies.json`, written by `bench/context_policies.py`). What
this is not: a measurement; it only formats files.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl import evidence

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "context-calc-chain" / "results"
CALC = {policy: RESULTS / f"context_calc_chain_{policy}.json" for policy in ("full", "window")}
POLICIES = ROOT / "bench" / "results" / "context_policies.json"  # a benchmark's (bench/context_policies.py)
CONTEXT_DOC = ROOT / "docs" / "context.md"
STUDY_DOC = ROOT / "docs" / "credit_study.md"
BLOCKS = {
    "calc": ("<!-- context-calc:start (studies/scripts/context_report.py) -->", "<!-- context-calc:end -->"),
    "swebench": (
        "<!-- context-swebench:start (studies/scripts/context_report.py) -->",
        "<!-- context-swebench:end -->",
    ),
    "update": (
        "<!-- context-update:start (studies/scripts/context_report.py) -->",
        "<!-- context-update:end -->",
    ),
}
TARGET = 0.1


def part_gap(by_part: Sequence[float]) -> float:
    """The later part's success farthest from part 1's, minus part 1's (signed: below part 1 is negative)."""
    return max((value - by_part[0] for value in by_part[1:]), key=abs, default=0.0)


def calc_table(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """Per policy and decoding: success by part, overall, the largest gap to part 1, the target."""
    parts = max(int(report["parts"]) for report in reports.values())
    head = " | ".join(f"part {k + 1}" for k in range(parts))
    rows = [
        f"| policy | decoding | {head} | all parts | largest gap to part 1 | within {TARGET} | "
        "invalid turns |",
        "|---|---|" + "---|" * parts + "---|---|---|---|",
    ]
    for policy, report in reports.items():
        for evaluation in report["evaluations"]:
            by_part = [float(value) for value in evaluation["by_part_index"]]
            temperature = float(evaluation["temperature"])
            decoding = "greedy" if temperature == 0 else f"T={temperature:g}"
            gap = part_gap(by_part)
            cells = " | ".join(f"{value:.3f}" for value in by_part)
            rows.append(
                f"| {policy} | {decoding} | {cells} | {evaluation['per_part_success']:.3f} | {gap:+.3f} | "
                f"{'yes' if abs(gap) <= TARGET else 'no'} | {evaluation['invalid_turn_rate']:.3f} |"
            )
    tasks = {int(report["eval_tasks"]) for report in reports.values()}
    files = ", ".join(f"`{path.relative_to(ROOT)}`" for path in CALC.values())
    return "\n".join(rows) + f"\n\n{'/'.join(map(str, sorted(tasks)))} held-out chains per row ({files})."


def swebench_table(report: Mapping[str, Any]) -> str:
    """Per agent, policy and context size: turns reached, stopped by `max_tokens`, segments, resolved."""
    rows = [
        "| agent | policy | max_context_tokens | turns (mean) | turns (max) | stopped by max_tokens | "
        "segments per episode | summary turns | resolved | infra failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in sorted(report["cells"], key=lambda c: (c["agent"], c["max_context_tokens"])):
        rows.append(
            f"| {cell['agent']} | {cell['policy']} | {cell['max_context_tokens']:,} | "
            f"{cell['turns_mean']:.1f} | {cell['turns_max']} | {cell['max_tokens_share']:.0%} | "
            f"{cell['segments_mean']:.1f} | {cell.get('summary_turns_mean', 0.0):.1f} | "
            f"{cell['success_share']:.0%} | {cell['infra_failures']} |"
        )
    episodes = {int(cell["episodes"]) for cell in report["cells"]}
    note = f"{'/'.join(map(str, sorted(episodes)))} held-out tasks per row"
    return "\n".join(rows) + f"\n\n{note} (`bench/results/{POLICIES.name}`, commit {report['commit'][:7]})."


def update_table(report: Mapping[str, Any]) -> str:
    """Per task and policy: samples, tokens and update seconds per episode, seconds against `full`."""
    rows = [
        "| task | policy | episodes | samples per episode | tokens per episode | "
        "sampled tokens per episode | update s per episode | seconds over full's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task, policies in report["update"].items():
        full = policies.get("full", {}).get("update_s_per_episode")
        for policy, row in policies.items():
            ratio = f"{row['update_s_per_episode'] / full:.2f}" if full else ""
            rows.append(
                f"| {task} | {policy} | {row['episodes']} | {row['samples_per_episode']:.1f} | "
                f"{row['tokens_per_episode']:,.0f} | {row['sampled_tokens_per_episode']:,.0f} | "
                f"{row['update_s_per_episode']:.2f} | {ratio} |"
            )
    measured = report.get("update_run") or report
    flags = ", ".join(flag for flag, present in measured["cpu_flags"].items() if present) or "none of them"
    how = f"`{measured['command']}`, a run of its own" if "update_run" in report else "one run"
    return "\n".join(rows) + f"\n\n{how}, CPU flags {flags} (`bench/results/{POLICIES.name}`)."


def blocks() -> dict[str, str]:
    """The generated blocks whose files exist."""
    out: dict[str, str] = {}
    if all(path.is_file() for path in CALC.values()):
        out["calc"] = calc_table({policy: json.loads(path.read_text()) for policy, path in CALC.items()})
    if POLICIES.is_file():
        report = json.loads(POLICIES.read_text())
        out["swebench"] = swebench_table(report)
        out["update"] = update_table(report)
    return out


def rewrite(text: str, made: Mapping[str, str], where: Path) -> str:
    """`text` with each made block that it has markers for replaced."""
    for name, block in made.items():
        start, end = BLOCKS[name]
        if start in text:
            text = evidence.replace_block(text, block, start, end, str(where))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-docs", action="store_true", help="rewrite the blocks of both pages")
    args = parser.parse_args(argv)
    made = blocks()
    if not args.write_docs:
        print("\n\n".join(made.values()))
        return 0
    for doc in (CONTEXT_DOC, STUDY_DOC):
        doc.write_text(rewrite(doc.read_text(), made, doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
