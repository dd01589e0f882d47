"""`agentrl.evidence`'s pure parts: a run's held-out episodes grouped into evaluations and paired task by task
(no store, no model).

What this is: checks on hand-written episode rows. What it is not: a check of a committed evidence file (the
calc demo's are the records of the study studies/calc-demo, tests/unit/test_study_calc_demo.py).
"""

from __future__ import annotations

from agentrl.evidence import evaluations_of, paired


def test_evidence_groups_eval_episodes_by_step_and_pairs_tasks() -> None:
    episodes = [
        {"split": "eval", "step": step, "task_id": task, "success": ok, "reward": float(ok), "error": None}
        for step, task, ok in [(0, "a", False), (0, "b", True), (4, "a", True), (4, "b", True)]
    ] + [{"split": "train", "step": 1, "task_id": "a", "success": True, "reward": 1.0, "error": None}]
    first, last = evaluations_of(episodes, 0.7, "eval")
    assert (first["step"], first["successes"], last["step"], last["successes"]) == (0, 1, 4, 2)
    assert first["temperature"] == 0.7 and first["label"] == "eval@0"
    assert paired(first, last) == [
        {"task_id": "a", "before": False, "after": True},
        {"task_id": "b", "before": True, "after": True},
    ]


def test_an_infrastructure_failure_is_not_scored() -> None:
    episodes = [
        {"split": "eval", "step": 0, "task_id": "a", "success": False, "reward": 0.0, "error": "boom"}
    ]
    (only,) = evaluations_of(episodes, 0.3, "control_before")
    assert only["tasks"] == 0 and only["per_task"][0]["success"] is None and only["label"] == "control_before"
