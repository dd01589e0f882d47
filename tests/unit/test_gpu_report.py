"""`bench/gpu_report.py`: the GPU table in docs/gpu.md is what the committed report makes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from gpu_report import END, REPORT, START, main, table  # noqa: E402


def block_of(path: Path) -> str:
    return path.read_text().split(START, 1)[1].split(END, 1)[0].strip()


def test_the_gpu_page_quotes_the_committed_report() -> None:
    made = table(json.loads(REPORT.read_text()))
    assert block_of(ROOT / "docs" / "gpu.md") == made.replace("](bench/", "](../bench/")


def test_a_failed_check_shows_its_error_and_the_run_says_failed() -> None:
    report = json.loads(REPORT.read_text())
    report["passed"] = False
    report["checks"]["lora"] = {"passed": False, "error": "ModuleNotFoundError: No module named 'x'"}
    made = table(report)
    assert "**FAILED**" in made
    assert "| lora | no | ModuleNotFoundError: No module named 'x' |" in made


def test_a_skip_report_is_refused_with_its_reason(tmp_path: Path) -> None:
    skipped = tmp_path / "gpu_check.json"
    skipped.write_text(json.dumps({"skipped": True, "passed": None}))
    with pytest.raises(SystemExit, match="skip report"):
        main(["--report", str(skipped)])
