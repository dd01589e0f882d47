"""Go/no-gos 2, 3 and 4 of docs/credit_study.md part 3 on `agentrl study`: each study's report, made from its
committed records alone, gives the figures the go/no-go script wrote before the study tool existed, and the
verdict docs/credit_study.md recorded (no-go, on the criteria it names).

What this is: a comparison of numbers read from committed files. What it is not: a rerun of a go/no-go.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.study.gonogo import load_gonogo, verdict
from agentrl.study.runner import Layout, read_record

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "studies" / "calc-chain-gonogo" / "results"
CASES = {
    "calc-chain-gonogo2": (
        {"base": "calc_chain_gonogo_k2"},
        ["(a) equal parts", "(b) GiGPO differs from GRPO"],
    ),
    "calc-chain-gonogo3": ({"base": "calc_chain_gonogo_repeat"}, ["(a) equal parts"]),
    "calc-chain-gonogo4": (
        {"t03": "calc_chain_gonogo_t03", "t05": "calc_chain_gonogo_t05"},
        ["(b1) later parts carry signal", "(b2) the step term moves GiGPO"],
    ),
}


@pytest.mark.parametrize("study", sorted(CASES))
def test_a_converted_gonogo_regenerates_its_figures_and_its_no_go(study: str) -> None:
    layout = Layout(ROOT / "studies" / study)
    spec = load_gonogo(layout.spec)
    files, failed = CASES[study]
    found = verdict(spec, {variant.name: read_record(layout, variant.name) for variant in spec.variants})
    assert found["go"] is False and found["complete"]
    for variant, stem in files.items():
        old = json.loads((OLD / f"{stem}.json").read_text())
        measures = found["variants"][variant]["measures"]
        batch = old["batch"]
        assert measures["cosine_grpo_vs_gigpo"] == batch["grpo_vs_gigpo"]["cosine"]
        assert measures["cosine_gigpo_vs_episode_term"] == batch["gigpo_episode_term_vs_gigpo"]["cosine"]
        signal = batch.get("part_start_signal")  # counted from go/no-go 4 on
        assert measures["later_part_signal_share"] == (signal["share_with_signal"] if signal else None)
        if old["evaluations"]:
            best = max(old["evaluations"], key=lambda e: (e["per_part_success"], -e["temperature"]))
            assert measures["best_per_part_success"] == best["per_part_success"]
        failing = {item["name"] for item in found["variants"][variant]["criteria"] if not item["holds"]}
        assert failing == set(failed)
        record = read_record(layout, variant)
        assert (
            record is not None
            and record["converted_from"][0]["file"] == f"studies/calc-chain-gonogo/results/{stem}.json"
        )
