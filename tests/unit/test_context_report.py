"""`studies/scripts/context_report.py`: docs/context.md and docs/credit_study.md quote exactly what the
committed context-policy results files make, and the table's gap to part 1 is signed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from context_report import BLOCKS, CONTEXT_DOC, STUDY_DOC, blocks, part_gap  # noqa: E402


@pytest.mark.parametrize("doc", [CONTEXT_DOC, STUDY_DOC], ids=lambda path: path.name)
def test_the_pages_quote_the_committed_files(doc: Path) -> None:
    text = doc.read_text()
    made = blocks()
    quoted = {name: marks for name, marks in BLOCKS.items() if marks[0] in text}
    assert quoted, f"{doc.name} has no generated context block"
    for name, (start, end) in quoted.items():
        assert name in made, f"{doc.name} quotes {name}, whose results file is not committed"
        assert text.split(start, 1)[1].split(end, 1)[0].strip() == made[name].strip(), name


def test_the_gap_to_part_1_keeps_its_sign() -> None:
    assert part_gap([0.55, 0.26, 0.16]) == pytest.approx(-0.39)
    assert part_gap([0.45, 0.46, 0.55]) == pytest.approx(0.10)
    assert part_gap([0.5]) == 0.0
