"""`agentrl study` on a go/no-go file end to end: the tiny random model (`tiny_model`) on the maze, a base
variant and one trained a few env steps first, through plan, run (an interruption resumed), status and
report with its go or no-go line.

What is checked: both variants are measured (the held-out evaluation and the base batch with its advantage
comparison), the trained variant's measurement reads its own final weights, a record cut back to its
evaluation is resumed by playing the batch alone, and the verdict follows the criteria named in the file.
What it is not: a test of the measures' arithmetic (tests/unit/test_study_gonogo.py) or of a real task.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from stored_runs import TINY_MAZE_STUDY_OVERRIDES, run_study

GONOGO = {
    "kind": "gonogo",
    "title": "tiny maze go/no-go",
    "task": "maze",
    "overrides": [
        *TINY_MAZE_STUDY_OVERRIDES,
        "train.tasks_per_step=2",
        "train.group_size=2",
    ],
    "variants": [
        {"name": "base"},
        {"name": "grpo-6", "overrides": ["credit.estimator=grpo"], "train_env_steps": 6},
    ],
    "eval_tasks": 2,
    "decodings": [0.0],
    "criteria": [
        {"name": "some groups", "measure": "zero_variance_groups", "at_most": 1.0},
        {"name": "signal per part", "measure": "later_part_signal_share", "at_least": 0.5},
    ],
}


def study(repo_root: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_study(repo_root, root, "gate", *args)


def test_a_gonogo_study_measures_its_variants_resumes_and_says_no_go(
    repo_root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    folder = tmp_path / "gate"
    folder.mkdir()
    spec = {**GONOGO, "overrides": [f"model.name={tiny_model}", *GONOGO["overrides"]]}
    (folder / "study.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    assert study(repo_root, tmp_path, "plan").returncode == 0
    ran = study(repo_root, tmp_path, "run")
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert "training grpo-6" in ran.stdout
    records = {
        path.stem: json.loads(path.read_text()) for path in (folder / "results" / "runs").glob("*.json")
    }
    assert set(records) == {"base", "grpo-6"} and all(record["done"] for record in records.values())
    for record in records.values():
        assert [item["temperature"] for item in record["evaluations"]] == [0.0]
        assert record["batch"]["episodes"] == 4 and len(record["batch"]["advantages"]["grpo"]) >= 4
    assert records["base"]["model"] == "" and records["grpo-6"]["model"].endswith("gate-grpo-6-train/final")

    # an interruption after the trained variant's evaluation, before its batch: the run plays the batch only
    cut = {key: value for key, value in records["grpo-6"].items() if key != "batch"}
    (folder / "results" / "runs" / "grpo-6.json").write_text(json.dumps({**cut, "done": False}))
    resumed = study(repo_root, tmp_path, "run")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    again = json.loads((folder / "results" / "runs" / "grpo-6.json").read_text())
    assert again["done"] and again["evaluations"] == records["grpo-6"]["evaluations"] and "batch" in again
    assert "training grpo-6" not in resumed.stdout  # its final weights were reused, not trained again

    status = study(repo_root, tmp_path, "status")
    assert status.returncode == 0 and status.stdout.count(": done") == 2
    reported = study(repo_root, tmp_path, "report")
    assert reported.returncode == 0, reported.stderr[-3000:]
    summary = json.loads((folder / "results" / "summary.json").read_text())
    # the maze has one part: no later-part anchor group, so "signal per part" fails on both and it is no-go
    assert summary["go"] is False and summary["passing"] == [] and summary["complete"]
    assert "**NO-GO**" in reported.stdout and "signal per part" in reported.stdout
