"""`agentrl study plan|run|status|report` end to end: a 2-arm, 2-seed study on the maze with the tiny random
model (`tiny_model`), through the real trainer and evaluation, in a study folder under tmp_path.

What is checked: `run` refuses before `plan`, after study.yaml changes and when a run's checkpoints are
gone; `--until` stops between runs; every planned run finishes with its checkpoints' points and decodings
on disk; an interrupted run (its last point and "done" taken out of its record) resumes from its trainer
checkpoint and trains only what is missing; `report` writes the
summary, the table (into a page's block too) and the plot, with every pre-named statistic. What it is not:
a test of learning (a random model), or of the statistics' arithmetic (tests/unit/test_study.py).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from stored_runs import TINY_MAZE_STUDY_OVERRIDES, run_study

from agentrl.study.report import markers

STUDY = {
    "title": "tiny maze: gigpo vs grpo",
    "task": "maze",
    "overrides": [
        *TINY_MAZE_STUDY_OVERRIDES,
        "train.tasks_per_step=1",
        "train.group_size=2",
        "loss.entropy_coef=0.01",
        "eval.temperature=0.7",
    ],
    "arms": [
        {"name": "grpo", "overrides": ["credit.estimator=grpo"]},
        {"name": "gigpo", "overrides": ["credit.estimator=gigpo"]},
    ],
    "seeds": [0, 1],
    "env_step_budget": 12,
    "checkpoints": 2,
    "eval_tasks": 2,
    "decodings": [0.0],
    "evaluations": [{"name": "more", "tasks": 3, "decodings": [0.0]}],
    "base_seeds": [0, 1],
    "base_pass_at": 2,
    "references": [
        {
            "name": "sft",
            "demos": 2,
            "overrides": [
                "sft.epochs=1",
                "sft.batch_size=2",
                "rollout.max_turns=12",
                "sampling.max_new_tokens=96",
            ],
        }  # fmt: skip
    ],
    "statistics": [
        {"kind": "vs_base", "arm": "gigpo"},
        {"kind": "paired", "arm": "gigpo", "other": "grpo"},
        {"kind": "steps_to_threshold", "arm": "gigpo", "other": "grpo", "threshold": 0.5},
        {"kind": "paired", "arm": "gigpo", "other": "grpo", "set": "more", "temperature": 0.0},
        {"kind": "steps_to_final", "arm": "gigpo", "other": "grpo"},
        {"kind": "collapse_rate", "arm": "gigpo", "set": "more"},
    ],
}


def study(repo_root: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_study(repo_root, root, "tiny", *args)


@pytest.mark.slow  # trains 2 arms x 2 seeds: two minutes in a test worker
def test_a_two_arm_two_seed_study_plans_runs_resumes_and_reports(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    spec = {**STUDY, "overrides": [f"model.name={tiny_model}", *STUDY["overrides"]]}
    (folder / "study.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    refused = study(repo_root, tmp_path, "run")
    assert refused.returncode == 2 and "agentrl study plan tiny" in refused.stderr

    planned = study(repo_root, tmp_path, "plan")
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["runs"] == ["base", "sft", "grpo-seed0", "gigpo-seed0", "grpo-seed1", "gigpo-seed1"]
    assert plan["checkpoints"] == [6, 12]

    ran = study(repo_root, tmp_path, "run")
    assert ran.returncode == 0, ran.stderr[-4000:]
    records = {
        path.stem: json.loads(path.read_text()) for path in (folder / "results" / "runs").glob("*.json")
    }
    assert set(records) == set(plan["runs"]) and all(record["done"] for record in records.values())
    assert all(len(record["machines"]) == 1 for record in records.values())  # one CPU, one precision
    # the base: the eval temperature at both sampler seeds, greedy once, the further set, then pass@2
    evaluated = [
        (d["set"], d["temperature"], d["eval_seed"], d["samples"]) for d in records["base"]["decodings"]
    ]
    assert evaluated == [
        ("", 0.7, 0, 1),
        ("", 0.7, 1, 1),
        ("", 0.0, 0, 1),
        ("more", 0.0, 0, 1),
        ("", 0.8, 0, 2),
    ]
    assert [d["tasks"] for d in records["base"]["decodings"]] == [2, 2, 2, 3, 2]
    assert len(records["base"]["decodings"][-1]["per_task"]) == 4  # 2 tasks x 2 episodes, pass@2 of them
    for name in plan["runs"][2:]:
        points = records[name]["points"]
        assert [point["checkpoint_env_steps"] for point in points] == [6, 12]
        assert points[0]["env_steps"] >= 6 and points[1]["env_steps"] >= 12
        assert [(d["set"], d["temperature"]) for d in records[name]["decodings"]] == [
            ("", 0.0),
            ("more", 0.0),
        ]

    # every run's second point resumed its trainer from the first one's checkpoint: one run, steps counted on
    for name in plan["runs"][2:]:
        first, second = records[name]["points"]
        assert second["train_step"] > first["train_step"] and second["env_steps"] > first["env_steps"]
    trained = {
        path.name for path in (folder / "runs").iterdir() if path.is_dir() and "-eval-" not in path.name
    }
    assert trained == {f"tiny-{name}" for name in plan["runs"][2:]} | {"tiny-sft-demos", "tiny-sft-sft"}
    # the SFT reference line: demonstrations, SFT, then the evaluations of a trained run's final weights
    reference = records["sft"]
    assert reference["demos"]["kept"] == 2 and reference["env_steps"] == reference["demos"]["env_steps"] > 0
    assert [(d["set"], d["temperature"]) for d in reference["decodings"]] == [
        ("", 0.7), ("", 0.0), ("more", 0.0),
    ]  # fmt: skip

    # an interruption after gigpo-seed1 trained and evaluated its last point, before its record said so: the
    # next run trains nothing again; it takes the point from the checkpoint and the stored evaluation
    before = records["gigpo-seed1"]
    cut = {**before, "points": before["points"][:1], "decodings": [], "done": False}
    (folder / "results" / "runs" / "gigpo-seed1.json").write_text(json.dumps(cut))
    resumed = study(repo_root, tmp_path, "run")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "grpo-seed0" not in resumed.stdout and "gigpo-seed1" in resumed.stdout
    assert "step 3 " not in resumed.stdout  # no training step was played again
    again = json.loads((folder / "results" / "runs" / "gigpo-seed1.json").read_text())
    assert again["done"] and again["points"] == before["points"]

    # an interruption during that evaluation (its episodes never stored): the runner evaluates the last
    # checkpoint's weights again, seeded as the segment's own evaluation was, and gets the same point
    (folder / "results" / "runs" / "gigpo-seed1.json").write_text(json.dumps(cut))
    with sqlite3.connect(folder / "runs" / "store.db") as db:
        hidden = db.execute(
            "UPDATE episodes SET split = 'eval-lost' WHERE split = 'eval' AND step = ? AND run_id IN "
            "(SELECT id FROM runs WHERE name = 'tiny-gigpo-seed1')",
            (before["points"][-1]["train_step"],),
        ).rowcount
    assert hidden == 2
    replayed = study(repo_root, tmp_path, "run")
    assert replayed.returncode == 0, replayed.stderr[-4000:]
    assert "evaluation, interrupted, played again" in replayed.stdout and "step 3 " not in replayed.stdout
    again = json.loads((folder / "results" / "runs" / "gigpo-seed1.json").read_text())
    assert again["done"] and again["points"][-1]["per_task"] == before["points"][-1]["per_task"]

    # --until: a study that would not end a run by then stops between runs, before it starts one
    (folder / "results" / "runs" / "gigpo-seed1.json").write_text(json.dumps(cut))
    stopped = study(repo_root, tmp_path, "run", "--until", "2000-01-01T00:00")
    assert stopped.returncode == 0, stopped.stderr[-4000:]
    assert "stopped before gigpo-seed1" in stopped.stdout and "step 3 " not in stopped.stdout
    assert json.loads((folder / "results" / "runs" / "gigpo-seed1.json").read_text()) == cut
    # its checkpoints gone (another machine, a fresh clone): refused, not trained from the base weights
    run_dir = folder / "runs" / "tiny-gigpo-seed1"
    run_dir.rename(run_dir.with_name("elsewhere"))
    lost = study(repo_root, tmp_path, "run")
    assert lost.returncode == 2 and "holds no checkpoint to resume from" in lost.stderr
    run_dir.with_name("elsewhere").rename(run_dir)
    (folder / "results" / "runs" / "gigpo-seed1.json").write_text(json.dumps(again))

    status = study(repo_root, tmp_path, "status")
    assert status.returncode == 0 and status.stdout.count("done (") == 6

    page = tmp_path / "page.md"
    start, end = markers("tiny")
    page.write_text(f"# results\n{start}\nold\n{end}\nafter\n")
    readme = tmp_path / "README.md"
    readme.write_text("{}\nold\n{}\n".format(*markers("tiny", "headline")))
    reported = subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "study", "report", "tiny", "--root", str(tmp_path),
         "--page", str(page), "--headline", str(readme)],
        cwd=repo_root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert reported.returncode == 0, reported.stderr[-3000:]
    summary = json.loads((folder / "results" / "summary.json").read_text())
    assert [item["kind"] for item in summary["statistics"]] == [
        "vs_base", "paired", "steps_to_threshold", "paired", "steps_to_final", "collapse_rate",
    ]  # fmt: skip
    assert summary["statistics"][3]["set"] == "more" and summary["base"]["pass_at"]["k"] == 2
    assert set(summary["base"]["sets"]["more"]) == {"0.0"}
    assert summary["statistics"][1]["seeds"] == [0, 1] and summary["not_finished"] == []
    assert (folder / "results" / "curves.png").stat().st_size > 0
    table = (folder / "results" / "table.md").read_text()
    assert table.strip() in page.read_text() and page.read_text().endswith(f"{end}\nafter\n")
    assert "| sft (reference: SFT on 2 demonstrations) |" in table
    assert (folder / "results" / "seeds.png").stat().st_size > 0
    assert (folder / "results" / "training.png").stat().st_size > 0
    assert {path.stem for path in (folder / "results" / "metrics").glob("*.jsonl")} >= {
        f"{arm}-seed{seed}" for arm in ("grpo", "gigpo") for seed in (0, 1)
    }
    assert "4 of 4 trained runs finished.\n- gigpo minus grpo" in readme.read_text()
    commits = {commit for record in summary["runs"].values() for commit in record["commits"]}
    assert len(commits) == 1 and f"one code commit, {next(iter(commits))[:12]}.\n" in table
    assert table.rstrip().split("\n")[-1].startswith("All runs played on one kind of CPU: ")

    # pre-registration: a changed study file is refused until it is planned again
    (folder / "study.yaml").write_text(yaml.safe_dump({**spec, "seeds": [0, 1, 2]}, sort_keys=False))
    changed = study(repo_root, tmp_path, "run")
    assert changed.returncode == 2 and "differs from the study that was planned" in changed.stderr
