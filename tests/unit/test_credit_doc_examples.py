"""The worked examples of docs/credit.md, run through the record API.

Each example in the doc is a fenced block opened by "```json credit-example" holding the input records and,
per run, the estimator, its options and the expected advantages (rounded to 6 decimals). The numbers are
read from the doc itself, so the doc and the code cannot drift apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentrl.credit import ESTIMATORS, estimate_records

DOC = Path(__file__).resolve().parents[2] / "docs" / "credit.md"
BLOCK = re.compile(r"^```json credit-example\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TOLERANCE = 6e-7  # the doc rounds to 6 decimals (an error of at most 5e-7)


def doc_examples() -> list[dict[str, Any]]:
    return [json.loads(block) for block in BLOCK.findall(DOC.read_text(encoding="utf-8"))]


def doc_runs() -> list[Any]:
    return [
        pytest.param(example["records"], run, id=f"{example['example']}-{index}-{run['estimator']}")
        for example in doc_examples()
        for index, run in enumerate(example["runs"])
    ]


@pytest.mark.parametrize(("records", "run"), doc_runs())
def test_a_worked_example_gives_the_documented_numbers(
    records: list[dict[str, Any]], run: dict[str, Any]
) -> None:
    got = estimate_records(run["estimator"], records, **run["options"])
    expected = run["expected"]
    assert [len(steps) for steps in got] == [len(steps) for steps in expected]
    for episode, (got_steps, expected_steps) in enumerate(zip(got, expected, strict=True)):
        assert got_steps == pytest.approx(expected_steps, abs=TOLERANCE), f"episode {episode}"


def test_every_registered_estimator_has_a_worked_example() -> None:
    documented = {run["estimator"] for example in doc_examples() for run in example["runs"]}
    assert documented == set(ESTIMATORS)


def test_the_examples_the_other_tests_cite_are_in_the_doc() -> None:
    names = {example["example"] for example in doc_examples()}
    assert {"A", "G1", "H1", "S1", "I1"} <= names
