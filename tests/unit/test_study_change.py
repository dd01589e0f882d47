"""`agentrl.study`'s `change` statistic (each run's final value minus the base's on the same tasks, its tasks
gained and lost with their exact sign-test p, the band over seeds of the changes) and records that never
counted env steps (the calc demo's, converted): pure logic on hand-written records.

What this is: checks of `agentrl.study.report` and `agentrl.study.stats` on small records. What it is not:
the check of the calc demo's converted study against its old table (tests/unit/test_study_calc_demo.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.study.report import (
    copy_training_metrics,
    mean_curve,
    plot,
    plot_seeds,
    seed_lines,
    summarise,
    table,
    training_lines,
)
from agentrl.study.runner import Layout, done_text
from agentrl.study.spec import load_spec
from agentrl.study.stats import band, sign_test_p

SPEC: dict[str, Any] = {
    "task": "calc",
    "arms": [{"name": "grpo", "overrides": ["credit.estimator=grpo"]}],
    "seeds": [0, 1, 2],
    "env_step_budget": 384,
    "checkpoints": 1,
    "eval_tasks": 4,
    "decodings": [0.3],
    "statistics": [
        {"kind": "change", "arm": "grpo", "at": "training"},
        {"kind": "change", "arm": "grpo", "temperature": 0.3},
    ],
}


def evaluation(temperature: float, outcomes: str, **extra: Any) -> dict[str, Any]:
    """An evaluation entry from a string of outcomes ("1" solved, "0" not, "x" an infrastructure failure)."""
    per_task = [
        {"task_id": f"t{i}", "success": None if mark == "x" else mark == "1", "reward": float(mark == "1")}
        for i, mark in enumerate(outcomes)
    ]
    scored = [mark for mark in outcomes if mark != "x"]
    value = scored.count("1") / len(scored)
    return {"temperature": temperature, "value": value, "tasks": len(scored), "per_task": per_task, **extra}


def trained(seed: int, at_training: str, at_control: str | None, steps: int | None = None) -> dict[str, Any]:
    point = evaluation(0.7, at_training, checkpoint_env_steps=384, env_steps=steps, train_step=4)
    return {
        "run": f"grpo-seed{seed}",
        "arm": "grpo",
        "seed": seed,
        "points": [point],
        "decodings": [] if at_control is None else [evaluation(0.3, at_control)],
        "env_steps": steps,
        "wall_s": None,
        "done": True,
    }


BASE = {
    "run": "base",
    "points": [],
    "decodings": [evaluation(0.7, "1000"), evaluation(0.3, "1110")],
    "env_steps": 0,
    "wall_s": None,
    "done": True,
}


def summary(tmp_path: Path, runs: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return summarise(load_spec(path), {"base": BASE, **runs})


def test_sign_test_p_matches_hand_computed_values() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(3, 0) == pytest.approx(2 / 8)  # 2 * P(X <= 0), X ~ Bin(3, 1/2)
    assert sign_test_p(0, 3) == sign_test_p(3, 0)
    assert sign_test_p(18, 5) == pytest.approx(0.0106, abs=1e-4)
    assert sign_test_p(1, 1) == 1.0  # the doubled tail is capped at 1


def test_each_run_changes_against_the_base_on_the_same_tasks_with_a_band_over_seeds(tmp_path: Path) -> None:
    runs = {
        "grpo-seed0": trained(0, "1110", "1111"),  # +0.5 at 0.7: t1, t2 gained
        "grpo-seed1": trained(1, "0100", "0100"),  # +0 at 0.7: t1 gained, t0 lost
        "grpo-seed2": trained(2, "11x1", "1111"),  # t2 an infrastructure failure: 3 tasks compared
    }
    at_training, control = summary(tmp_path, runs)["statistics"]
    assert at_training["base_decoding"] == {"temperature": 0.7, "value": 0.25}
    rows = {row["run"]: row for row in at_training["per_run"]}
    first = rows["grpo-seed0"]
    assert (first["change"], first["gained"], first["lost"]) == (0.5, 2, 0)
    assert (rows["grpo-seed1"]["gained"], rows["grpo-seed1"]["lost"], rows["grpo-seed1"]["p"]) == (1, 1, 1.0)
    assert rows["grpo-seed2"]["tasks"] == 3 and rows["grpo-seed2"]["change"] == pytest.approx(1.0 - 0.25)
    assert rows["grpo-seed0"]["p"] == sign_test_p(2, 0)
    mean, low, high = band([0.5, 0.0, 0.75])
    assert at_training["changes"] == [0.5, 0.0, 0.75]
    assert at_training["mean"] == mean and at_training["band"] == [low, high]
    assert at_training["above_zero"] is (low > 0)
    assert control["base_decoding"] == {"temperature": 0.3, "value": 0.75}
    assert control["changes"] == [0.25, 0.25 - 0.75, 0.25]


def test_a_run_never_evaluated_there_is_named_and_counted_at_0(tmp_path: Path) -> None:
    runs = {
        "grpo-seed0": trained(0, "1110", "1111"),
        "grpo-seed1": trained(1, "1100", None),  # no evaluation at 0.3
        "grpo-seed2": trained(2, "1111", "1111"),
    }
    at_training, control = summary(tmp_path, runs)["statistics"]
    assert at_training["not_evaluated_there"] == [] and "worst_case" not in at_training
    assert control["not_evaluated_there"] == ["grpo-seed1"] and control["seeds"] == [0, 2]
    worst = band([0.25, 0.25, -0.75])
    assert control["worst_case"]["mean"] == worst[0] and control["worst_case"]["band"] == [worst[1], worst[2]]
    shown = table(summary(tmp_path, runs))
    assert "grpo-seed1 never evaluated there: counted at 0" in shown


def test_the_table_gives_every_runs_change_and_says_when_env_steps_were_not_recorded(tmp_path: Path) -> None:
    runs = {f"grpo-seed{seed}": trained(seed, "1110", "1111") for seed in range(3)}
    shown = table(summary(tmp_path, runs))
    assert "| grpo-seed0 | not recorded | 0.750 | 1.000 | 1 / 0 |" in shown  # gained/lost at the best, T=0.3
    line = next(line for line in shown.splitlines() if "at the training temperature" in line)
    assert line.startswith(
        "- grpo minus the base at the training temperature (T=0.7, base 0.250), run by run on the same 4 "
        "tasks: +0.500 [+0.500, +0.500] over 3 runs, above 0"
    )
    assert f"grpo-seed2 +0.500, 2 / 0, p {sign_test_p(2, 0):.3g}" in line


def test_a_curve_without_env_steps_has_none_there_and_the_plot_leaves_it_out(tmp_path: Path) -> None:
    runs = [trained(0, "1110", None), trained(1, "1100", None, steps=300)]
    curve = mean_curve(0.25, runs)
    assert curve[0]["env_steps"] == 0.0 and curve[1]["env_steps"] is None
    assert curve[1]["mean"] == pytest.approx(0.625)
    assert mean_curve(0.25, runs[1:])[1]["env_steps"] == 300.0
    plot({"grpo": curve}, tmp_path / "curves.png", "title", "success rate")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_status_says_what_a_converted_record_did_not_record() -> None:
    assert done_text({"env_steps": None, "wall_s": None}) == "env steps not recorded, wall time not recorded"
    assert done_text({"env_steps": 1662, "wall_s": 1913.5}) == "1662 env steps, 1914 s"


def test_the_seeds_plot_leaves_out_a_point_without_env_steps(tmp_path: Path) -> None:
    runs = {"grpo-seed0": trained(0, "1110", None), "grpo-seed1": trained(1, "1100", None, steps=300)}
    lines = seed_lines(summary(tmp_path, {**runs, "grpo-seed2": None}))["grpo"]
    assert lines["grpo-seed0"] == [(0.0, 0.25)] and lines["grpo-seed1"] == [(0.0, 0.25), (300.0, 0.5)]
    plot_seeds({"grpo": lines}, tmp_path / "seeds.png", "title", "success rate")
    assert (tmp_path / "seeds.png").stat().st_size > 0


def test_each_training_runs_metrics_are_copied_to_results_and_drawn_per_seed(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "tiny")
    rows = [
        {"step": 1, "reward_mean": 1.0, "env_steps_total": 200.0},
        {"step": 2, "reward_mean": 2.5, "env_steps_total": 410.0},
        {"step": 3, "loss": 0.1},  # a step that logged neither: not drawn
    ]
    for name in ("tiny-grpo-seed0", "tiny-grpo-seed0-eval-main-T0-s0-k1-1", "tiny-sft-sft"):
        (layout.train_runs / name).mkdir(parents=True)
        (layout.train_runs / name / "metrics.jsonl").write_text("".join(f"{json.dumps(r)}\n" for r in rows))
    (layout.train_runs / "tiny-grpo-seed1").mkdir()  # started, no step logged yet: nothing to copy
    copied = copy_training_metrics(layout)
    assert sorted(copied) == ["grpo-seed0", "sft-sft"]  # an evaluation's metrics are not a training run's
    assert copied["grpo-seed0"] == layout.results / "metrics" / "grpo-seed0.jsonl"
    source = layout.train_runs / "tiny-grpo-seed0" / "metrics.jsonl"
    assert copied["grpo-seed0"].read_text() == source.read_text()
    runs = {"grpo-seed0": trained(0, "1110", None), "grpo-seed1": trained(1, "1100", None)}
    lines = training_lines(summary(tmp_path, runs), copied)
    assert lines == {"grpo": {"grpo-seed0": [(200.0, 1.0), (410.0, 2.5)]}}
    plot_seeds(lines, tmp_path / "training.png", "title", "reward", unit_range=False)
    assert (tmp_path / "training.png").stat().st_size > 0
    shutil.rmtree(layout.train_runs)  # a fresh clone: the committed copies are still drawn
    assert copy_training_metrics(layout) == copied
