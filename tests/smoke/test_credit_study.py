"""`bench/credit_study.py --quick`: the study runner end to end (real model, real training, two estimators).

Also checks the pure parts of the summary (checkpoints, bands, the GiGPO-vs-GRPO ratio) on hand-made curves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import credit_study  # noqa: E402


def point(steps: float, mean: float) -> dict[str, float]:
    return {"env_steps": steps, "mean": mean, "low": mean, "high": mean}


def test_checkpoints_are_evenly_spaced_and_end_at_the_budget() -> None:
    assert credit_study.checkpoints(600, 3) == [200, 400, 600]
    assert credit_study.checkpoints(5, 2) == [3, 5]
    with pytest.raises(ValueError, match="must be >= 1"):
        credit_study.checkpoints(0, 2)


def test_band_is_a_student_t_interval() -> None:
    mean, low, high = credit_study.band([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(4.303 * 0.1 / 3**0.5)
    assert credit_study.band([0.4]) == (0.4, 0.4, 0.4)


def test_ratio_is_the_first_checkpoint_reaching_grpos_final_mean() -> None:
    grpo = [point(0, 0.1), point(300, 0.2), point(600, 0.3)]
    faster = [point(0, 0.1), point(300, 0.35), point(600, 0.4)]
    slower = [point(0, 0.1), point(300, 0.2), point(600, 0.25)]
    assert credit_study.steps_to_reach_ratio(faster, grpo, 600.0) == pytest.approx(0.5)
    assert credit_study.steps_to_reach_ratio(slower, grpo, 600.0) is None


def test_per_seed_ratios_use_each_runs_own_curve() -> None:
    grpo = [point(0, 0.1), point(300, 0.2), point(600, 0.3)]
    runs = [
        {"curve": [{"env_steps": 300, "success_rate": 0.3}, {"env_steps": 600, "success_rate": 0.4}]},
        {"curve": [{"env_steps": 300, "success_rate": 0.1}, {"env_steps": 600, "success_rate": 0.2}]},
    ]
    assert credit_study.per_seed_ratios(runs, grpo, 600.0) == [pytest.approx(0.5), None]


@pytest.mark.slow
def test_every_run_starts_from_the_warm_start_made_under_the_studys_overrides(tmp_path: Path) -> None:
    study = credit_study.StudyConfig(runs_dir=str(tmp_path / "runs"))
    model = credit_study.warm_start_model(study)
    config = credit_study.run_config(study, "gigpo", 1)
    assert config.model.name == str(model) and model.parent.name.startswith("warm-start-")
    assert config.env.kwargs["text_moves"] is False and config.env.kwargs["coordinates"] is True
    assert config.credit.estimator == "gigpo"
    demos, sft = credit_study.warm_start_commands(study).values()
    assert demos[:6] == ["demos", "--task", "maze", "--policy", "scripted", "--n"]
    demos_file = tmp_path / "runs" / credit_study.warm_start_name(study, "demos") / "demos.jsonl"
    assert sft[sft.index("--demos") + 1] == str(demos_file)
    other = credit_study.StudyConfig(runs_dir=str(tmp_path / "runs"), overrides=study.overrides[:-1])
    assert credit_study.warm_start_model(other) != model  # other settings, another warm start
    for command in (demos, sft):
        assert set(study.overrides) <= set(command) and f"eval.num_tasks={study.eval_tasks}" in command
    given = credit_study.StudyConfig(warm_start_from=str(tmp_path / "nothing"))
    assert credit_study.run_config(given, "grpo", 0).model.name == str(tmp_path / "nothing")
    with pytest.raises(SystemExit, match="no model there"):
        credit_study.ensure_warm_start(given)
    cold = credit_study.StudyConfig(warm_start_demos=0)
    assert credit_study.ensure_warm_start(cold) is None
    assert credit_study.run_config(cold, "grpo", 0).model.name == "smollm2-135m-instruct"


def test_the_kept_plan_2_runs_still_match_the_default_study() -> None:
    """A study resumed across sessions reuses its kept runs only while their fingerprint matches."""
    kept = json.loads((ROOT / "bench/results/credit_study_warm_runs/grpo-seed0.json").read_text())
    assert kept["study"] == credit_study.fingerprint(credit_study.StudyConfig())


def test_quick_study_writes_json_and_plot(tmp_path: Path, tiny_model: Path) -> None:
    """The study's machinery end to end (base evaluation, runs in child processes, report, plot) with the
    tiny random model in place of SmolLM2: the numbers are not the point here."""
    out = tmp_path / "study.json"
    command = [
        sys.executable, str(ROOT / "bench" / "credit_study.py"), "--quick", "--out", str(out),
        f"runs_dir={tmp_path}/runs", f"store.url=sqlite:///{tmp_path}/store.db",
        f"model.name={tiny_model}", "rollout.max_context_tokens=4096",  # one byte per token
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"grpo", "gigpo"}
    for runs in report["runs"].values():
        (run,) = runs
        assert run["train_steps"] == 1 and run["env_steps"] >= 1 and len(run["curve"]) == 1
        assert 0.0 <= run["curve"][0]["success_rate"] <= 1.0 and 0.0 <= run["anchor_hit_rate"] <= 1.0
    assert "gigpo_steps_to_grpo_final_ratio" in report["summary"]
    assert out.with_suffix(".png").stat().st_size > 1000
