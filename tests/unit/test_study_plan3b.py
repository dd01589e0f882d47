"""Plan 3b on `agentrl study`: the study's report, made from its committed records alone, regenerates the
figures `studies/scripts/credit_study.py` committed before the study tool existed, and docs/benchmarks.md
quotes it.

What this is: a comparison of numbers read from committed files (the records under
`studies/calc-chain-plan3b/results/runs/` against the old report kept in `results/before/`). What it is
not: a rerun of the study (that is `agentrl study run calc-chain-plan3b`, hours on a CPU).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agentrl.study.report import markers, summarise, table
from agentrl.study.runner import Layout, planned_runs, read_record
from agentrl.study.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = Layout(ROOT / "studies" / "calc-chain-plan3b")
BEFORE = LAYOUT.results / "before" / "credit_study_calc_chain_grpo.json"


def summary(kept_only: bool = False) -> dict:
    spec = load_spec(LAYOUT.spec)
    if kept_only:  # as bench/credit_study.py reported it: the 4 finished seeds, not the collapsed first play
        spec = replace(spec, also_played=())
    return summarise(spec, {run.name: read_record(LAYOUT, run.name) for run in planned_runs(spec)})


def test_the_study_report_regenerates_plan_3bs_committed_figures() -> None:
    made = summary(kept_only=True)
    old = json.loads(BEFORE.read_text())["summary"]["above_base"]["grpo"]
    assert made["not_finished"] == [] and made["finished"] == {"grpo": 4}
    best, training = made["statistics"]
    for mine, theirs, above in (
        (best, old["best_temperature_figures"], old["best_temperature"]),
        (training, old["training_temperature_figures"], old["training_temperature"]),
    ):
        assert mine["values"] == pytest.approx(theirs["seeds"], abs=1e-12)
        assert [mine["mean"], *mine["band"]] == pytest.approx(theirs["band"], abs=1e-12)
        assert mine["base_decoding"]["value"] == pytest.approx(theirs["base"], abs=1e-12)
        assert mine["above_base"] is above is True
    assert best["base_decoding"]["temperature"] == 0.0 and training["base_decoding"]["temperature"] == 0.5


def test_with_every_started_run_counted_the_collapsed_first_play_is_in_both_statistics() -> None:
    """Seed 1's first play collapsed (0.007 per part at 0.5, its 800-step evaluation) and was stopped; it was
    never evaluated greedily, so the greedy statistic lists it as missing and gives the band with it at 0."""
    best, training = summary()["statistics"]
    kept_best, kept_training = summary(kept_only=True)["statistics"]
    assert training["values"][:4] == kept_training["values"] and len(training["values"]) == 5
    assert training["values"][4] == pytest.approx(0.020833 / 3, abs=1e-6) and not training["above_base"]
    assert best["values"] == kept_best["values"] and best["not_evaluated_there"] == ["grpo-seed1-first-play"]
    assert best["worst_case"]["mean"] == pytest.approx(sum(kept_best["values"]) / 5)
    assert not best["worst_case"]["above_base"]


def test_every_converted_record_names_the_kept_file_it_came_from() -> None:
    for path in sorted(LAYOUT.records.glob("*.json")):
        record = json.loads(path.read_text())
        sources = record["converted_from"]
        assert sources and all(
            source["file"].startswith(("bench/results/", "studies/")) for source in sources
        )
        assert all(source["commit"] for source in sources)


def test_the_benchmarks_page_quotes_the_study_report() -> None:
    start, end = markers("calc-chain-plan3b")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    block = page.split(start, 1)[1].split(end, 1)[0]
    assert block.strip() == table(summary()).strip()
