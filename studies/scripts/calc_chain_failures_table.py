"""The markdown table docs/credit_study.md quotes for plan 3b's failure counts, made from their JSON files.

    .venv/bin/python studies/scripts/calc_chain_failures_table.py \
        studies/calc-chain-plan3b/results/failures/calc_chain_failures_3b_*.json

What this is: one row per file written by `studies/scripts/calc_chain_failures.py` (one model, one decoding):
parts right by position, by wording, and each failure label summed over the parts. What this is not: a test or
a statistic; the labels are that script's heuristics.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LABELS = ("never_submitted", "repeated_action", "no_print", "syntax_error", "swapped", "carried_answer")


def model_name(path: Path) -> str:
    return path.stem.removeprefix("calc_chain_failures_3b_").removeprefix("calc_chain_failures")


def row(name: str, report: Mapping[str, Any]) -> str:
    labels: Counter[str] = Counter()
    for part in report["failure_labels_by_part"]:
        labels.update(part)
    by_part = " / ".join(f"{share:.2f}" for share in report["right_by_part"])
    forms = report["by_form"]
    wording = " / ".join(
        f"{forms[form]['right']} of {forms[form]['parts']}" for form in ("words", "reversed")
    )
    counts = " | ".join(str(labels[label]) for label in (*LABELS, "wrong_other"))
    failed = sum(report["failures_by_part"])
    return f"| {name} | {report['temperature']:g} | {by_part} | {wording} | {failed} | {counts} |"


def table(paths: Sequence[Path]) -> str:
    header = "| model | T | parts right 1 / 2 / 3 | words / reversed right | parts failed | "
    header += " | ".join((*LABELS, "wrong_other")) + " |"
    rule = "|" + "---|" * (6 + len(LABELS))
    rows = [row(model_name(path), json.loads(path.read_text())) for path in paths]
    return "\n".join([header, rule, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        raise SystemExit(
            "give the failure-count JSON files, e.g. "
            "studies/calc-chain-plan3b/results/failures/calc_chain_failures_3b_*.json"
        )
    print(table(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
