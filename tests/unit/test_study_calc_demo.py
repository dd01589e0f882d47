"""The calc demo's four seeds on `agentrl study`: the study's report, made from its committed records alone,
gives the numbers studies/scripts/demo_report.py computed from the `make demo` evidence files (kept in
`studies/calc-demo/results/before/` when the script was removed), each record is its evidence file converted
unchanged, and docs/benchmarks.md quotes the report.

What this is: a comparison of numbers read from committed files. What it is not: a rerun of the demo (that
is `make demo`, or `agentrl study run calc-demo`, an hour or more on a CPU).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentrl.study.report import markers, summarise, table
from agentrl.study.runner import Layout, planned_runs, read_record
from agentrl.study.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = Layout(ROOT / "studies" / "calc-demo")
BEFORE = LAYOUT.results / "before"
EVIDENCE = LAYOUT.results / "demo"
SHARED = ("temperature", "tasks", "successes", "per_task")  # what an evaluation measured


def summary() -> dict[str, Any]:
    spec = load_spec(LAYOUT.spec)
    return summarise(spec, {run.name: read_record(LAYOUT, run.name) for run in planned_runs(spec)})


def fraction(text: str) -> float:
    """demo_report's "17/48 (0.354)" as the success rate it counts."""
    found = re.match(r"(\d+)/(\d+) ", text)
    assert found is not None, text
    return int(found.group(1)) / int(found.group(2))


def test_the_study_report_gives_the_numbers_demo_report_computed() -> None:
    old = json.loads((BEFORE / "demo_report.json").read_text())
    made = summary()
    assert made["not_finished"] == [] and made["finished"] == {"grpo": 4}
    headline, control = made["statistics"]
    rows = {row["seed"]: row for row in old["rows"]}
    for mine, band, change, base, after in (
        (headline, old["band"], "change", "before", "after"),
        (control, old["control_band"], "control_change", "control_before", "control_after"),
    ):
        assert [mine["mean"], *mine["band"]] == band
        assert sorted(mine["seeds"]) == sorted(rows)
        for found in mine["per_run"]:
            theirs = rows[found["seed"]]
            assert found["change"] == theirs[change] and found["value"] == fraction(theirs[after])
            assert mine["base_decoding"]["value"] == fraction(theirs[base])
            assert mine["base_decoding"]["temperature"] == (
                theirs["temperature"] if change == "change" else theirs["control_temperature"]
            )
        assert mine["changes"] == [rows[seed][change] for seed in mine["seeds"]]
    for found in headline["per_run"]:  # demo_report's per-run test is at the demo's temperature
        theirs = rows[found["seed"]]
        assert (found["gained"], found["lost"], found["p"]) == (theirs["gained"], theirs["lost"], theirs["p"])
    commits = made["code_commits"]
    assert all(
        any(
            commit.startswith(row["commit"]) and f"grpo-seed{seed}" in runs
            for commit, runs in commits.items()
        )
        for seed, row in rows.items()
    )


def test_the_kept_table_of_demo_report_shows_the_same_bands() -> None:
    old = (BEFORE / "demo_table.md").read_text()
    headline, control = summary()["statistics"]
    for item in (headline, control):
        low, high = item["band"]
        assert f"changed by {item['mean']:+.3f} on average over {len(item['changes'])} run(s)" in old
        assert f"95% t-band over seeds [{low:+.3f}, {high:+.3f}]" in old


def measured(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {key: evaluation[key] for key in SHARED}


def test_every_record_is_its_evidence_file_converted_unchanged() -> None:
    sources: dict[str, dict[str, Any]] = {}
    base = read_record(LAYOUT, "base")
    assert base is not None
    spec = load_spec(LAYOUT.spec)
    for run in planned_runs(spec)[1:]:
        record = read_record(LAYOUT, run.name)
        assert record is not None and len(record["converted_from"]) == 1
        named = record["converted_from"][0]
        assert named["commit"] and (ROOT / named["file"]).is_file()
        source = json.loads((ROOT / named["file"]).read_text())
        sources[named["file"]] = source
        evaluations = {item["label"]: item for item in source["evaluations"]}
        assert record["evidence"] == {key: value for key, value in source.items() if key != "evaluations"}
        assert record["seed"] == source["seeds"]["train"] and record["commits"] == [source["commit"]]
        (point,) = record["points"]
        (decoding,) = record["decodings"]
        assert {key: point[key] for key in evaluations["after"]} == evaluations["after"]
        assert {key: decoding[key] for key in evaluations["control_after"]} == evaluations["control_after"]
        assert measured(base["decodings"][0]) == measured(evaluations["before"])
        assert measured(base["decodings"][1]) == measured(evaluations["control_before"])
    assert len(sources) == len(spec.seeds) and all(
        Path(name).parent == EVIDENCE.relative_to(ROOT) for name in sources
    )
    assert sorted(item["file"] for item in base["converted_from"]) == sorted(sources)


def test_the_benchmarks_page_quotes_the_study_report() -> None:
    start, end = markers("calc-demo")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    block = page.split(start, 1)[1].split(end, 1)[0]
    assert block.strip() == table(summary()).strip()
