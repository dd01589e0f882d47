"""`agentrl.study` beyond one held-out set: further sets (`EvalSet`), the base at several sampler seeds, its
pass@k, and the statistics that use them (steps to another arm's final mean, the collapse rate). Pure logic
on hand-written records; tests/smoke/test_study_cli.py runs them through the real trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.study.report import arm_cell, base_values, final_at, headline, seed_lines, summarise, table
from agentrl.study.runner import (
    Evaluation,
    Layout,
    estimate_s,
    final_evaluations,
    outcome,
    planned_runs,
    write_record,
)
from agentrl.study.spec import load_spec

SPEC: dict[str, Any] = {
    "task": "calc-chain",
    "arms": [
        {"name": "grpo", "overrides": ["credit.estimator=grpo"]},
        {"name": "gigpo", "overrides": ["credit.estimator=gigpo"]},
    ],
    "seeds": [0, 1],
    "env_step_budget": 100,
    "checkpoints": 2,
    "eval_tasks": 4,
    "decodings": [0.5],
    "evaluations": [
        {"name": "big", "tasks": 8, "decodings": [0.0], "base_decodings": [0.3]},
        {"name": "ood", "tasks": 5, "decodings": [0.0], "overrides": ["tasks.suite=other"]},
    ],
    "base_seeds": [0, 1],
    "base_pass_at": 6,
    "statistics": [
        {"kind": "paired", "arm": "gigpo", "other": "grpo", "set": "big", "temperature": 0.0},
        {"kind": "vs_base", "arm": "gigpo", "set": "big"},
        {"kind": "steps_to_final", "arm": "gigpo", "other": "grpo"},
        {"kind": "collapse_rate", "arm": "grpo", "set": "big", "temperature": 0.0},
    ],
}


def load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def test_the_base_evaluates_every_set_a_sampled_decoding_at_each_seed_and_its_pass_at_k_last(
    tmp_path: Path,
) -> None:
    spec = load(tmp_path, SPEC)
    base = [item.key for item in final_evaluations(spec, 0.5, True, train_temperature=0.7)]
    assert base == [
        ("", 0.5, 0, 1), ("", 0.5, 1, 1),
        ("big", 0.0, 0, 1), ("big", 0.3, 0, 1), ("big", 0.3, 1, 1),
        ("ood", 0.0, 0, 1),
        ("", 0.7, 0, 6),
    ]  # fmt: skip
    trained = final_evaluations(spec, 0.5, base=False)
    assert [item.key for item in trained] == [("", 0.5, 0, 1), ("big", 0.0, 0, 1), ("ood", 0.0, 0, 1)]
    assert trained[-1] == Evaluation("ood", 5, 0.0, 0, 1, ("tasks.suite=other",))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"evaluations": [{"name": "a", "tasks": 2, "decodings": [0.0]}] * 2}, "distinct, non-empty name"),
        ({"evaluations": [{"name": "a", "tasks": 2, "decodings": []}]}, "at least one decoding"),
        ({"evaluations": [{"name": "a", "tasks": 0, "decodings": [0.0]}]}, "tasks >= 1"),
        ({"base_seeds": []}, "at least one seed"),
        ({"statistics": [{"kind": "vs_base", "arm": "grpo", "set": "huge"}]}, "set='huge' is not one of"),
        ({"statistics": [{"kind": "steps_to_final", "arm": "grpo"}]}, "needs `other`"),
        ({"references": [{"name": "grpo", "demos": 8}]}, "its name distinct from the arms"),
        ({"references": [{"name": "sft", "demos": 8, "kind": "distill"}]}, "kind must be sft"),
        ({"references": [{"name": "sft", "demos": 0}]}, "demos >= 1"),
    ],
)
def test_a_set_or_statistic_that_is_not_well_posed_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load(tmp_path, {**SPEC, **change})


def test_pass_at_k_scores_each_task_by_its_best_episode_and_counts_infra_failures_apart() -> None:
    rows = [
        {"task_id": "a", "error": None, "success": False, "reward": 1.0},
        {"task_id": "a", "error": None, "success": True, "reward": 4.0},
        {"task_id": "b", "error": None, "success": False, "reward": 2.0},
        {"task_id": "b", "error": "sandbox died", "success": False, "reward": 0.0},
    ]
    found = outcome(rows, "per_part_success", parts=4, samples=2)
    assert found["value"] == pytest.approx((4 + 2) / 8) and found["tasks"] == 2
    assert found["infra_failures"] == 1 and len(found["per_task"]) == 4
    assert outcome(rows, "success_rate", parts=4, samples=2)["value"] == 0.5


def decoding(on: str, temperature: float, value: float, seed: int = 0, samples: int = 1) -> dict[str, Any]:
    return {"set": on, "temperature": temperature, "eval_seed": seed, "samples": samples, "value": value}


def run(arm: str, seed: int, curve: list[float], big: float) -> dict[str, Any]:
    points = [
        {"checkpoint_env_steps": 50 * (i + 1), "env_steps": 50 * (i + 1), "temperature": 0.5, "value": v}
        for i, v in enumerate(curve)
    ]
    decodings = [decoding("", 0.5, curve[-1]), decoding("big", 0.0, big), decoding("big", 0.3, big - 0.1)]
    return {"run": f"{arm}-seed{seed}", "arm": arm, "seed": seed, "points": points, "decodings": decodings,
            "env_steps": 100, "wall_s": 1.0, "done": True}  # fmt: skip


BASE = {
    "decodings": [
        decoding("", 0.5, 0.20, 0), decoding("", 0.5, 0.30, 1),
        decoding("big", 0.0, 0.40), decoding("big", 0.3, 0.30, 0), decoding("big", 0.3, 0.20, 1),
        decoding("ood", 0.0, 0.10), decoding("", 0.5, 0.70, 0, samples=6),
    ],
    "done": True, "points": [], "env_steps": 0, "wall_s": 1.0,
}  # fmt: skip


def test_a_sampled_decoding_is_the_mean_over_seeds_and_pass_at_k_stays_out_of_the_base_values() -> None:
    assert base_values(BASE) == {0.5: pytest.approx(0.25)}
    assert base_values(BASE, "big") == {0.0: 0.40, 0.3: pytest.approx(0.25)}
    record = run("grpo", 0, [0.3, 0.5], 0.6)
    assert final_at(record, 0.0, "big") == 0.6 and final_at(record, None, "big") == 0.6
    assert final_at(record, 0.3, "ood") is None and final_at(record, None) == 0.5


def test_the_statistics_on_a_further_set_steps_to_final_and_the_collapse_rate(tmp_path: Path) -> None:
    spec = load(tmp_path, SPEC)
    records = {
        "base": BASE,
        "grpo-seed0": run("grpo", 0, [0.3, 0.5], 0.6),
        "gigpo-seed0": run("gigpo", 0, [0.6, 0.7], 0.8),
        "grpo-seed1": run("grpo", 1, [0.1, 0.1], 0.2),  # collapsed: below the base's best on big (0.40)
        "gigpo-seed1": run("gigpo", 1, [0.2, 0.4], 0.5),
    }
    summary = summarise(spec, records)
    paired, vs_base, steps, collapse = summary["statistics"]
    assert paired["set"] == "big" and paired["difference"] == pytest.approx(0.25)  # (0.2 + 0.3) / 2
    assert vs_base["base_decoding"] == {"temperature": 0.0, "value": 0.40} and vs_base["values"] == [0.8, 0.5]
    # grpo's final mean is 0.3; gigpo seed 0 reaches it between 0 (base 0.25) and 50 steps, seed 1 at 75
    assert steps["threshold"] == pytest.approx(0.3) and steps["reached_share"] == 1.0
    assert steps["gigpo"]["per_seed"] == {"0": pytest.approx(50 * 0.05 / 0.35), "1": pytest.approx(75.0)}
    assert collapse["collapsed"] == ["grpo-seed1"] and collapse["rate"] == 0.5
    assert summary["base"]["pass_at"] == {"k": 6.0, "temperature": 0.5, "value": 0.7}
    shown = table(summary)
    grpo, gigpo = (arm_cell(values) for values in ([0.6, 0.2], [0.8, 0.5]))  # each arm's mean and band
    assert grpo.startswith("0.400 [-2.") and grpo.endswith("] (2)")
    assert f"| big | 0 | 0.400 | {grpo} | {gigpo} |" in shown
    assert "pass@6 at T=0.5 on the main set: 0.700" in shown
    assert "grpo on big: 1 of 2 runs below the base's best (T=0, 0.400), collapse rate 0.50" in shown
    assert "gigpo minus grpo on big, paired by seed (2): +0.250" in shown
    lines = seed_lines(summary)  # a line per run, the base's value on the curve first
    assert list(lines) == ["grpo", "gigpo"] and list(lines["grpo"]) == ["grpo-seed0", "grpo-seed1"]
    assert lines["gigpo"]["gigpo-seed1"] == [(0.0, pytest.approx(0.25)), (50.0, 0.2), (100.0, 0.4)]
    short = headline(summary, "tiny", width=60)
    assert short.startswith("Study `studies/tiny/`: 4 of 4 trained runs finished.\n- gigpo minus grpo on big")
    assert "collapse" not in short and max(map(len, short.splitlines())) <= 60


def test_a_reference_line_plays_after_the_base_and_before_the_arms(tmp_path: Path) -> None:
    spec = load(tmp_path, {**SPEC, "references": [{"name": "sft", "demos": 300}]})
    found = planned_runs(spec)
    assert [run.name for run in found[:3]] == ["base", "sft", "grpo-seed0"]
    assert found[1].reference and found[1].arm is None and spec.reference("sft").kind == "sft"


def test_the_estimate_adds_the_seconds_the_base_and_a_reference_line_took(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    spec = load(folder, {**SPEC, "references": [{"name": "sft", "demos": 300}]})
    layout = Layout(folder)
    assert estimate_s(layout, spec) is None  # no arm's run has finished
    write_record(layout, "grpo-seed0", {"done": True, "wall_s": 200.0, "env_steps": 100})
    write_record(layout, "base", {"done": True, "wall_s": 30.0})
    write_record(layout, "sft", {"done": True, "wall_s": 20.0})
    assert estimate_s(layout, spec) == pytest.approx(2.0 * 100 * 4 + 30.0 + 20.0)  # 4 runs of 100 env steps


def test_each_run_keeps_the_code_commits_it_played_on_and_the_table_says_when_they_differ() -> None:
    from agentrl.study.report import code_commits, commits_line
    from agentrl.study.runner import code_commit, with_commit

    record = with_commit({"run": "grpo-seed0"}, "aaa")
    assert with_commit(record, "aaa")["commits"] == ["aaa"]  # resumed on the same code: listed once
    resumed = with_commit(record, "bbb")
    assert resumed["commits"] == ["aaa", "bbb"] and record["commits"] == ["aaa"]
    records = {"base": {"run": "base"}, "grpo-seed0": resumed, "gigpo-seed0": with_commit({}, "bbb")}
    found = code_commits(records)
    assert found == {"unrecorded": ["base"], "aaa": ["grpo-seed0"], "bbb": ["grpo-seed0", "gigpo-seed0"]}
    assert commits_line({"code_commits": found}).startswith("The runs span code commits: unrecorded: base;")
    assert (
        commits_line({"code_commits": {"bbb": ["gigpo-seed0"]}}) == "All runs played on one code commit, bbb."
    )
    assert code_commits({"base": {"run": "base"}, "grpo-seed0": None}) == {}  # an older study: no line
    assert len(code_commit().split("+")[0]) == 40  # this checkout's own commit


def test_each_run_keeps_the_cpu_and_precision_it_played_in_and_a_study_refuses_to_mix_precisions(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from agentrl.study.report import machines, machines_line
    from agentrl.study.runner import Layout, machine, refuse_other_precision, with_machine

    def config(kind: str = "auto", cached: str = "auto", autocast: bool = True) -> SimpleNamespace:
        engine = SimpleNamespace(
            kind=kind, cached=SimpleNamespace(precision=cached), hf=SimpleNamespace(autocast_bf16=autocast)
        )
        return SimpleNamespace(
            engine=engine,
            update=SimpleNamespace(autocast_bf16=autocast),
            model=SimpleNamespace(device="auto"),
        )

    def precision(entry: dict[str, Any]) -> tuple[str, str]:
        return entry["sampler"], entry["update"]

    assert precision(machine(config(), True)) == ("bfloat16", "bfloat16")
    assert precision(machine(config(), False)) == ("float32", "float32")  # auto without native bf16
    assert precision(machine(config(cached="float32", autocast=False), True)) == ("float32", "float32")
    assert precision(machine(config(kind="hf", autocast=False), True)) == ("float32", "float32")
    assert precision(machine(config(kind="vllm"), True)) == ("vllm", "bfloat16")
    assert precision(machine(config(), True, cuda=True)) == ("gpu", "gpu")  # the GPU's own, not checked
    bf16, fp32 = machine(config(), True), machine(config(), False)
    record = with_machine({"run": "grpo-seed0"}, bf16)
    assert with_machine(record, bf16)["machines"] == [bf16]  # resumed on the same machine: listed once
    layout = Layout(tmp_path / "study")
    (layout.root).mkdir()
    (layout.spec).write_text(yaml.safe_dump(SPEC))
    spec = load_spec(layout.spec)
    write_record(layout, "grpo-seed0", record)
    refuse_other_precision(layout, spec, "gigpo-seed0", bf16)  # the same precision: it plays
    with pytest.raises(ConfigError, match="gigpo-seed0 would play in sampler float32, update float32"):
        refuse_other_precision(layout, spec, "gigpo-seed0", fp32)
    pinned = machine(config(cached="float32", autocast=False), True)
    write_record(layout, "grpo-seed0", with_machine({"run": "grpo-seed0"}, pinned))
    refuse_other_precision(
        layout, spec, "gigpo-seed0", machine(config(cached="float32", autocast=False), False)
    )
    found = machines({"base": None, "grpo-seed0": record, "gigpo-seed0": with_machine({}, bf16)})
    assert list(found.values()) == [["grpo-seed0", "gigpo-seed0"]]
    assert machines_line({"machines": found}).startswith("All runs played on one kind of CPU: ")
    assert machines({"base": {"run": "base"}}) == {}  # an older study: no line


def test_a_run_trained_in_two_processes_is_read_from_the_stored_run_that_played_the_step() -> None:
    """A study stopped and resumed trains one run as two stored runs of one name (one per process): the
    evaluation at a step is read from the one that holds it, newest first, never an empty read of the other
    (the comparison's grpo-seed0 once recorded 0.000 at 840 env steps that way)."""
    from agentrl.study.runner import held_out_at

    def row(split: str, step: int, task: str) -> dict[str, Any]:
        return {"split": split, "step": step, "task_id": task}

    older = [row("train", 1, "a"), row("train", 2, "b")]  # stopped before its evaluation at step 4
    newer = [row("train", 3, "c"), row("eval", 4, "x"), row("eval", 4, "y"), row("train", 5, "d")]
    assert [r["task_id"] for r in held_out_at([newer, older], 4)] == ["x", "y"]
    assert held_out_at([newer, older], 8) == [] and held_out_at([], None) == []
    assert [r["task_id"] for r in held_out_at([older, newer], None)] == ["x", "y"]  # the first holding any


def test_a_comparison_with_the_base_at_a_named_temperature_says_so(tmp_path: Path) -> None:
    spec = load(tmp_path, {**SPEC, "statistics": [{"kind": "vs_base", "arm": "grpo", "temperature": 0.5}]})
    records = {"base": BASE, "grpo-seed0": run("grpo", 0, [0.3, 0.5], 0.6)}
    (found,) = summarise(spec, records)["statistics"]
    assert found["temperature"] == 0.5 and found["base_decoding"] == {"temperature": 0.5, "value": 0.25}
    assert "grpo vs the base at a named decoding (T=0.5, 0.250): 0.500" in table(summarise(spec, records))
