"""`bench/plan3b_table.py`: docs/benchmarks.md's plan 3b block is what the committed run files and report
make."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from plan3b_table import END, REPORT, START, gained_lost, page_block, verdict  # noqa: E402


def test_the_benchmarks_page_quotes_the_committed_plan3b_files() -> None:
    quoted = (ROOT / "docs" / "benchmarks.md").read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert quoted == page_block()


def test_gained_and_lost_count_chains_not_parts() -> None:
    assert gained_lost({"a": 1.0, "b": 2.0, "c": 0.0}, {"a": 3.0, "b": 1.0, "c": 0.0}) == (1, 1)


def test_the_verdict_says_so_when_the_band_does_not_clear_the_base() -> None:
    report = json.loads(REPORT.read_text())
    above = report["summary"]["above_base"]["grpo"]
    above["best_temperature"] = False
    assert "does not lie above it" in verdict(report)
