"""`studies/scripts/credit_study.py --quick`: the study runner end to end (real model, real training, two
estimators).

Also checks the pure parts of the summary (checkpoints, bands, the GiGPO-vs-GRPO ratio) on hand-made curves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

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


def runs_of(*curves: list[float]) -> list[dict]:
    """Kept-run summaries whose curves have these values at 300, 600, ... env steps."""
    return [
        {"curve": [{"env_steps": 300.0 * (i + 1), "checkpoint_env_steps": 300.0 * (i + 1), "success_rate": v}
                   for i, v in enumerate(curve)]}
        for curve in curves
    ]  # fmt: skip


def test_the_threshold_ratio_is_the_gyms_definition_interpolated_from_the_start() -> None:
    grpo, gigpo = np.array([[0.2, 0.3]]), np.array([[0.3, 0.4]])
    threshold, grpo_steps, gigpo_steps, ratio = credit_study.threshold_ratio(0.1, grpo, gigpo, [300, 600])
    assert threshold == pytest.approx(0.1 + 0.8 * 0.2)  # start + 0.8 x (GRPO's final - start)
    assert grpo_steps == pytest.approx(300 + 300 * (0.26 - 0.2) / 0.1)
    assert gigpo_steps == pytest.approx(300 * 0.16 / 0.2) and ratio == pytest.approx(gigpo_steps / grpo_steps)
    assert credit_study.threshold_ratio(0.5, grpo, gigpo, [300, 600]) == (None, None, None, None)


def test_a_gigpo_seed_that_never_reaches_the_threshold_is_censored_not_dropped() -> None:
    runs = {"grpo": runs_of([0.2, 0.3], [0.2, 0.3]), "gigpo": runs_of([0.3, 0.4], [0.2, 0.2])}
    summary = credit_study.threshold_ratio_summary(0.1, runs, "success_rate", resamples=400)
    assert summary["threshold"] == pytest.approx(0.26) and summary["ratio"] is not None  # mean: 0.25, 0.3
    low, high = summary["band"]
    assert high is None  # resamples holding only the slow seed never reach it: an infinite band end
    assert low is not None and low < summary["ratio"]
    slow = {**runs, "gigpo": runs_of([0.2, 0.2])}
    assert credit_study.threshold_ratio_summary(0.1, slow, "success_rate", resamples=50)["never_reached"]


def test_half_budget_comparison_is_an_unpaired_welch_band() -> None:
    runs = {"grpo": runs_of([0.2, 0.3], [0.2, 0.5]), "gigpo": runs_of([0.4, 0.5], [0.3, 0.5])}
    compared = credit_study.half_budget_comparison(runs, "success_rate")
    assert compared is not None and compared["half_env_steps"] == 300.0
    assert compared["difference"] == pytest.approx(0.35 - 0.4)
    low, high = compared["band"]
    assert low < compared["difference"] < high


def test_the_base_is_the_mean_of_its_evaluations() -> None:
    base = {"success_rate": 0.1, "repeats": [{"success_rate": 0.1}, {"success_rate": 0.2}]}
    assert credit_study.base_value(base, "success_rate") == pytest.approx(0.15)
    assert credit_study.base_value({"success_rate": 0.3}, "success_rate") == 0.3


def test_the_calc_chain_plan_is_what_docs_credit_study_md_fixed() -> None:
    plan = credit_study.STUDIES["calc-chain"]
    assert plan.estimators == ("grpo", "gigpo") and len(plan.seeds) >= 4 and plan.eval_tasks >= 48
    assert plan.eval_points >= 2 and plan.base_evaluations >= 2 and plan.metric == "per_part_success"
    assert credit_study.checkpoints(plan.env_steps, plan.eval_points)[0] * 2 == plan.env_steps


def test_the_calc_chain_tree_arms_run_at_the_flat_plans_seeds_budget_and_kept_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/credit_study.md part 3, "Tree arms": the dry run prints each arm, its overrides and budget."""
    flat, tree = credit_study.STUDIES["calc-chain"], credit_study.STUDIES["calc-chain-tree"]
    assert credit_study.fingerprint(tree) == credit_study.fingerprint(flat)  # the flat runs stay valid
    assert credit_study.run_dir_of(tree) == credit_study.run_dir_of(flat) and tree.out != flat.out
    assert credit_study.main(["--study", "calc-chain-tree", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    arms = {arm["arm"]: arm for arm in printed["arms"]}
    assert list(arms) == ["grpo", "gigpo", "tree_gigpo", "tree_grpo"]
    for arm in arms.values():
        assert arm["env_steps"] == flat.env_steps == 1600 and arm["checkpoints"] == [800, 1600]
        assert arm["runs"] == [f"{arm['arm']}-seed{seed}" for seed in (0, 1, 2, 3)]
    assert arms["gigpo"]["overrides"] == [] and arms["gigpo"]["env_steps_per_group_at_max_turns"] == 6 * 9
    for name, estimator in (("tree_gigpo", "gigpo"), ("tree_grpo", "tree_grpo")):
        arm = arms[name]
        assert arm["estimator"] == estimator and "rollout.tree.enabled=true" in arm["overrides"]
        assert arm["tree"] and arm["branch_turns"] == [1, 3, 6] and arm["group_size"] == 8
        assert arm["env_steps_per_group_at_max_turns"] == 1 + 2 * 2 + 4 * 3 + 8 * 3  # 41 for 8 leaves
        assert arm["forks_per_group"] == 7
    assert printed["kept_runs"] == str(credit_study.run_dir_of(flat))
    assert printed["estimated_wall_s"] > credit_study.estimate_wall_s(flat)  # twice the runs


def test_a_trees_env_steps_count_each_shared_turn_once_and_no_fork() -> None:
    from types import SimpleNamespace

    def episode(turns: int, parent: str | None = None, branch_turn: int | None = None) -> SimpleNamespace:
        played = SimpleNamespace(is_summary=False)  # an env turn (a summary turn is no env step)
        return SimpleNamespace(turns=[played] * turns, parent_id=parent, branch_turn=branch_turn)

    root, branch, deeper = episode(9), episode(9, "root", 1), episode(9, "branch", 3)
    assert credit_study.env_steps_of([root, branch, deeper]) == 9 + 8 + 6
    assert credit_study.forks_of([root, branch, deeper]) == 2
    assert credit_study.env_steps_of([episode(9), episode(7)]) == 16  # flat: every turn
    assert credit_study.tree_env_steps(10, (5,), 4) == 25  # docs/tree_rollouts.md: 25 instead of 40
    assert credit_study.tree_env_steps(9, (1, 3, 6), 2) == 41


def test_a_kept_arm_run_is_reused_only_under_the_same_arm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = credit_study.StudyConfig(kept_runs=tmp_path)
    arm = credit_study.Arm("tree_gigpo", "gigpo", ("rollout.tree.enabled=true",))
    kept = {"study": credit_study.fingerprint(study), "arm": arm.record(), "result": {"seed": 0}}
    (tmp_path / "tree_gigpo-seed0.json").write_text(json.dumps(kept))
    plain = {"study": credit_study.fingerprint(study), "result": {"seed": 1}}  # a run kept before arms
    (tmp_path / "gigpo-seed1.json").write_text(json.dumps(plain))

    def no_new_run(*args: object, **kwargs: object) -> None:
        raise RuntimeError("ran")

    monkeypatch.setattr(credit_study.subprocess, "run", no_new_run)
    assert credit_study.kept_or_run(study, "tree_gigpo-seed0", ["tree_gigpo:0"], arm) == {"seed": 0}
    assert credit_study.kept_or_run(study, "gigpo-seed1", ["gigpo:1"]) == {"seed": 1}
    other = credit_study.Arm("tree_gigpo", "gigpo", ("rollout.tree.enabled=true", "train.group_size=4"))
    with pytest.raises(RuntimeError, match="ran"):  # other overrides: run again
        credit_study.kept_or_run(study, "tree_gigpo-seed0", ["tree_gigpo:0"], other)
    assert credit_study.Arm("gigpo", "gigpo").record() is None


def test_the_tree_arms_statistics_are_the_plans_and_tree_against_flat() -> None:
    base = {"success_rate": 0.1, "repeats": [{"success_rate": 0.1}, {"success_rate": 0.15}]}
    runs = {
        "grpo": runs_of([0.2, 0.3], [0.2, 0.5]),
        "gigpo": runs_of([0.3, 0.4], [0.3, 0.4]),
        "tree_gigpo": runs_of([0.4, 0.6], [0.5, 0.6], [0.4, 0.6]),
        "tree_grpo": runs_of([0.1, 0.2], [0.1, 0.3]),
    }
    tree = credit_study.tree_summary(base, runs, "success_rate")
    assert set(tree) == {"tree_gigpo", "tree_grpo"} and tree["tree_grpo"]["flat"] == "grpo"
    versus = tree["tree_gigpo"]["minus_flat_full"]
    assert versus["env_steps"] == 600.0 and versus["difference"] == pytest.approx(0.6 - 0.4)
    assert versus["band"] == list(credit_study.welch_band([0.6] * 3, [0.4, 0.4])[1:])
    faster = tree["tree_gigpo"]["half_minus_grpo_full"]  # at 300 env steps against GRPO's at 600
    assert faster["difference"] == pytest.approx(1.3 / 3 - 0.4) and "tree_gigpo_half" in faster
    above = tree["tree_gigpo"]["above_base"]
    assert above["training_temperature"] is True and above["best_temperature"] is None
    figures = above["training_temperature_figures"]
    assert figures["seeds"] == [0.6] * 3 and figures["base"] == 0.15
    assert figures["band"][0] == pytest.approx(0.6)
    assert tree["tree_grpo"]["above_base"]["training_temperature"] is False  # band reaches below 0.15


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
    kept = json.loads(
        (ROOT / "studies/maze-credit/results/credit_study_warm_runs/grpo-seed0.json").read_text()
    )
    assert kept["study"] == credit_study.fingerprint(credit_study.StudyConfig())


def test_above_the_base_at_its_best_decoding_compares_the_seeds_band_with_the_base_s_best() -> None:
    def run(final: float, greedy: float) -> dict:
        return {"curve": [{"success_rate": final, "at_best_temperature": {"success_rate": greedy}}]}

    base = {"repeats": [run(0.2, greedy)["curve"][-1] for greedy in (0.30, 0.31)]}  # each a base evaluation
    above = credit_study.above_base(base, [run(0.7, 0.8), run(0.8, 0.9), run(0.6, 0.85)], "success_rate")
    figures = above["best_temperature_figures"]
    assert above["best_temperature"] is True and figures["base"] == 0.31
    assert figures["seeds"] == [0.8, 0.9, 0.85]
    assert figures["band"] == list(credit_study.band([0.8, 0.9, 0.85]))
    wide = credit_study.above_base(base, [run(0.7, 0.9), run(0.7, 0.2)], "success_rate")
    assert wide["best_temperature"] is False  # two seeds this far apart: the band reaches below 0.31


def test_quick_study_writes_json_and_plot(tmp_path: Path, tiny_model: Path) -> None:
    """The study's machinery end to end (base evaluation, runs in child processes, report, plot) with the
    tiny random model in place of SmolLM2: the numbers are not the point here."""
    out = tmp_path / "study.json"
    command = [
        sys.executable, str(ROOT / "studies" / "scripts" / "credit_study.py"), "--quick", "--out", str(out),
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
    assert "gigpo_steps_to_threshold" in report["summary"]
    assert out.with_suffix(".png").stat().st_size > 1000
    saved = sorted(path.parent.name for path in (tmp_path / "runs").glob("*/final/config.json"))
    assert len(saved) == 2, saved  # each run's final weights, for the failure count
