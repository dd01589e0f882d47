"""`agentrl.study`: the study file's checks (each error names the fix), the statistics and the summary made
from hand-written run records (pure logic, no training; tests/smoke/test_study_cli.py runs a real study)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.cli.study import deadline
from agentrl.errors import ConfigError
from agentrl.study.report import summarise, table
from agentrl.study.runner import (
    checkpoint_points,
    checkpoint_weights,
    outcome,
    planned_runs,
    refuse_lost_checkpoints,
    seconds_needed,
    starts_before,
)
from agentrl.study.spec import load_spec
from agentrl.study.stats import band, censored_steps, paired_band, steps_to_threshold

GOOD: dict[str, Any] = {
    "task": "maze",
    "arms": [
        {"name": "grpo", "overrides": ["credit.estimator=grpo"]},
        {"name": "gigpo", "overrides": ["credit.estimator=gigpo"]},
    ],
    "seeds": [0, 1],
    "env_step_budget": 100,
    "checkpoints": 2,
    "decodings": [0.0],
    "statistics": [
        {"kind": "vs_base", "arm": "gigpo"},
        {"kind": "paired", "arm": "gigpo", "other": "grpo"},
        {"kind": "steps_to_threshold", "arm": "gigpo", "other": "grpo", "threshold": 0.5},
    ],
}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arms": [{"name": "grpo", "overrides": []}]}, "overrides nothing"),
        ({"seeds": [0]}, "needs at least 2 distinct seeds"),
        ({"statistics": [{"kind": "vs_base", "arm": "ppo"}]}, "names the arm 'ppo'"),
        ({"statistics": [{"kind": "paired", "arm": "gigpo"}]}, "needs `other`"),
        ({"statistics": [{"kind": "median", "arm": "gigpo"}]}, "kind 'median' is unknown"),
        ({"metric": "reward"}, "study.metric='reward' is unknown"),
        ({"budget": 10}, "unknown key(s) ['budget']"),
        ({"statistics": []}, "name what the study will report before it runs"),
        ({"statistics": [{"kind": "vs_base", "arm": "gigpo", "at": "greedy"}]}, "use best or training"),
        (
            {"also_played": [{"name": "x", "arm": "ppo", "seed": 0, "why": "stopped"}]},
            "its arm must be one of",
        ),
        ({"also_played": [{"name": "x", "arm": "grpo", "seed": 0, "why": ""}]}, "why it is outside the plan"),
    ],
)
def test_a_study_file_that_is_not_well_posed_is_refused_with_the_fix(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_spec(write(tmp_path, {**GOOD, **change}))
    assert message in str(caught.value)


def test_the_plan_runs_the_base_then_each_seed_across_the_arms(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert [run.name for run in planned_runs(spec)] == [
        "base", "grpo-seed0", "gigpo-seed0", "grpo-seed1", "gigpo-seed1",
    ]  # fmt: skip
    assert checkpoint_points(100, 2) == [50, 100] and checkpoint_points(10, 3) == [4, 7, 10]


def test_statistics() -> None:
    mean, low, high = band([0.5, 0.7])
    assert mean == pytest.approx(0.6) and low < 0.6 < high and high - mean == pytest.approx(mean - low)
    assert band([0.3]) == (0.3, 0.3, 0.3)
    assert paired_band([0.5, 0.7], [0.4, 0.6])[0] == pytest.approx(0.1)
    assert paired_band([0.5, 0.7], [0.4, 0.6])[1] == pytest.approx(0.1)  # equal differences: no spread
    assert steps_to_threshold([(0, 0.2), (50, 0.4), (100, 0.8)], 0.6) == pytest.approx(75.0)
    assert steps_to_threshold([(0, 0.2), (100, 0.3)], 0.6) is None
    censored = censored_steps([75.0, None, 50.0], budget=100.0)
    assert censored == {"mean_lower_bound": pytest.approx(75.0), "censored": 1, "median": 75.0}
    assert censored_steps([None, None, 10.0], budget=100.0)["median"] is None


def test_outcome_counts_infra_failures_apart_and_scores_per_part() -> None:
    rows = [
        {"task_id": "a", "error": None, "success": True, "reward": 3.0},
        {"task_id": "b", "error": None, "success": False, "reward": 1.0},
        {"task_id": "c", "error": "sandbox died", "success": False, "reward": 0.0},
    ]
    found = outcome(rows, "per_part_success", parts=3)
    assert found["value"] == pytest.approx(4 / 6) and found["infra_failures"] == 1 and found["tasks"] == 2
    assert outcome(rows, "success_rate", parts=3)["value"] == pytest.approx(0.5)


def record(
    arm: str | None, seed: int | None, values: list[float], final: float, done: bool = True
) -> dict[str, Any]:
    points = [
        {"checkpoint_env_steps": 50 * (i + 1), "env_steps": 50 * (i + 1), "train_step": i + 1,
         "temperature": 0.7, "value": value}
        for i, value in enumerate(values)
    ]  # fmt: skip
    return {"arm": arm, "seed": seed, "points": points, "env_steps": 50 * len(values), "wall_s": 1.0,
            "decodings": [{"temperature": 0.0, "value": final}], "done": done}  # fmt: skip


def test_the_summary_keeps_every_run_and_computes_the_named_statistics(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    decodings = [{"temperature": 0.7, "value": 0.2}, {"temperature": 0.0, "value": 0.3}]
    base = {"points": [], "decodings": decodings, "done": True, "env_steps": 0, "wall_s": 1.0}
    records = {
        "base": base,
        "grpo-seed0": record("grpo", 0, [0.3, 0.4], 0.45),
        "grpo-seed1": record("grpo", 1, [0.2, 0.0], 0.05),  # collapsed: it stays in every number
        "gigpo-seed0": record("gigpo", 0, [0.5, 0.7], 0.8),
        "gigpo-seed1": None,  # not started
    }
    summary = summarise(spec, records)
    assert summary["not_finished"] == ["gigpo-seed1"] and summary["finished"] == {"grpo": 2, "gigpo": 1}
    vs_base, paired, steps = summary["statistics"]
    assert vs_base["base_decoding"] == {"temperature": 0.0, "value": 0.3} and vs_base["values"] == [0.8]
    assert paired["seeds"] == [0] and paired["difference"] == pytest.approx(
        0.3
    )  # 0.7 - 0.4 at the last point
    assert steps["gigpo"]["per_seed"] == {"0": pytest.approx(50.0)}  # 0.5 first reached at its first point
    assert steps["grpo"]["censored"] == 2 and steps["grpo"]["mean_lower_bound"] == 100.0
    curve = summary["curves"]["grpo"]
    assert [point["mean"] for point in curve] == pytest.approx([0.2, 0.25, 0.2])
    shown = table(summary)
    assert "gigpo-seed1 | | not started" in shown and "grpo-seed1 | 100 | 0.000" in shown
    assert "gigpo minus grpo, paired by seed (1): +0.300 (one seed: no band)" in shown
    assert "over 1 runs" in shown and "0.800 (one run: no band) over 1 runs" in shown


def test_the_example_study_of_docs_studies_md_is_well_posed(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "studies.md").read_text()
    example = page.split("`studies/<name>/study.yaml`:\n\n```text\n", 1)[1].split("```", 1)[0]
    spec = load_spec(write(tmp_path, yaml.safe_load(example)))
    assert [arm.name for arm in spec.arms] == ["grpo", "gigpo"] and len(spec.statistics) == 3


def test_vs_base_at_the_training_temperature_and_tasks_gained_and_lost_at_the_best_decoding(
    tmp_path: Path,
) -> None:
    at_training = {"kind": "vs_base", "arm": "gigpo", "at": "training"}
    spec = load_spec(write(tmp_path, {**GOOD, "statistics": [at_training]}))
    outcomes = {"a": 1.0, "b": 0.0, "c": 1.0}
    base_tasks = [
        {"task_id": task, "success": bool(reward), "reward": reward} for task, reward in outcomes.items()
    ]
    base = {
        "points": [], "done": True, "env_steps": 0, "wall_s": 1.0,
        "decodings": [{"temperature": 0.7, "value": 0.2},
                      {"temperature": 0.0, "value": 0.3, "per_task": base_tasks}],
    }  # fmt: skip
    trained = record("gigpo", 0, [0.5, 0.7], 0.8)
    trained["decodings"][0]["per_task"] = [
        {"task_id": "a", "success": False, "reward": 0.0},  # lost
        {"task_id": "b", "success": True, "reward": 1.0},  # gained
        {"task_id": "c", "success": None, "reward": 0.0},  # an infrastructure failure: not compared
    ]
    summary = summarise(spec, {"base": base, "gigpo-seed0": trained, "gigpo-seed1": None})
    vs_base = summary["statistics"][0]
    assert vs_base["at"] == "training" and vs_base["base_decoding"] == {"temperature": 0.7, "value": 0.2}
    assert vs_base["values"] == [0.7]  # the last point, evaluated at the training temperature
    shown = table(summary)
    assert "| base | 0 | 0.200 | 0.300 | |" in shown
    assert "| gigpo-seed0 | 100 | 0.700 | 0.800 | 1 / 1 |" in shown
    assert "gigpo vs the base at the training temperature (T=0.7, 0.200): 0.700" in shown


def test_a_checkpoint_is_evaluated_with_the_tokenizer_files_the_run_saved_and_adapters_alone_are_refused(
    tmp_path: Path,
) -> None:
    run_dir, checkpoint = tmp_path / "run", tmp_path / "run" / "checkpoints" / "step-000003"
    checkpoint.mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no full weights"):
        checkpoint_weights(run_dir, checkpoint)
    for name in ("config.json", "model.safetensors", "state.json", "trainer.pt"):
        (checkpoint / name).write_text(f"checkpoint {name}")
    with pytest.raises(ConfigError, match="before it saved final/"):
        checkpoint_weights(run_dir, checkpoint)
    (run_dir / "final").mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (run_dir / "final" / name).write_text(f"final {name}")
    folder = checkpoint_weights(run_dir, checkpoint)
    assert sorted(path.name for path in folder.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    assert (folder / "model.safetensors").read_text() == "checkpoint model.safetensors"
    assert (folder / "tokenizer.json").read_text() == "final tokenizer.json"
    assert checkpoint_weights(run_dir, checkpoint) == folder  # made once


def test_a_record_with_trained_points_but_no_checkpoint_left_is_refused_not_trained_from_the_base(
    tmp_path: Path,
) -> None:
    run_dir, newest = tmp_path / "run", tmp_path / "run" / "checkpoints" / "step-000005"
    fresh = {"run": "grpo-seed1", "points": []}
    trained = {"run": "grpo-seed1", "points": [{"checkpoint_env_steps": 800, "train_step": 5}]}
    refuse_lost_checkpoints(fresh, run_dir, None)  # nothing trained yet: it starts from the base
    refuse_lost_checkpoints(trained, run_dir, newest)  # trained and checkpointed: it resumes
    with pytest.raises(ConfigError, match="grpo-seed1 has 1 trained point.*remove its record"):
        refuse_lost_checkpoints(trained, run_dir, None)


def test_until_starts_a_run_only_when_its_estimate_ends_by_then_and_reads_a_time_of_day_as_the_next_one(
    tmp_path: Path,
) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    half = {"env_steps": spec.env_step_budget / 2}
    assert seconds_needed(spec, None, 2.0) == 2.0 * spec.env_step_budget
    assert seconds_needed(spec, half, 2.0) == spec.env_step_budget  # a resumed run needs what is left
    assert seconds_needed(spec, half, None) is None
    assert starts_before(100.0, 200.0, 100.0) and not starts_before(100.0, 200.0, 100.5)
    assert starts_before(100.0, 200.0, None) and not starts_before(200.0, 200.0, None)  # unknown: while time
    now = datetime(2026, 12, 7, 2, 40)
    assert deadline("04:40", now) == datetime(2026, 12, 7, 4, 40)
    assert deadline("01:00", now) == datetime(2026, 12, 8, 1, 0)  # passed today: tomorrow's
    assert deadline("2026-12-07T01:00", now) == datetime(2026, 12, 7, 1, 0)  # as given, even if passed
    with pytest.raises(ConfigError, match="--until takes a time of day"):
        deadline("in two hours", now)
