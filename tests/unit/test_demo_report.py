"""`studies/scripts/demo_report.py` on fixture evidence files; `agentrl.evidence`'s pure parts (no store, no
model)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentrl.evidence import evaluations_of, paired

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from demo_report import END, START, band, load_records, mcnemar_exact, replace_block, table  # noqa: E402


def evidence(
    seed: int, before: list[bool], after: list[bool], control: tuple[int, int] | None = None
) -> dict:
    def evaluation(label: str, outcomes: list[bool], temperature: float) -> dict:
        per_task = [{"task_id": f"t{i}", "success": ok, "reward": float(ok)} for i, ok in enumerate(outcomes)]
        counts = {"tasks": len(outcomes), "successes": sum(outcomes)}
        return {"label": label, "temperature": temperature, **counts, "per_task": per_task}

    evaluations = [evaluation("before", before, 0.7), evaluation("after", after, 0.7)]
    if control is not None:
        evaluations += [
            evaluation("control_before", [i < control[0] for i in range(len(before))], 0.3),
            evaluation("control_after", [i < control[1] for i in range(len(before))], 0.3),
        ]
    return {
        "run": f"demo-seed{seed}",
        "commit": "abcdef0123",
        "seeds": {"train": seed, "eval_sampler": 0, "env": 0},
        "temperature": {"train": 0.7, "eval": 0.7},
        "evaluations": evaluations,
        "per_task": [
            {"task_id": f"t{i}", "before": b, "after": a}
            for i, (b, a) in enumerate(zip(before, after, strict=True))
        ],
    }


def write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['run']}.json").write_text(json.dumps(record))
    return folder


def test_mcnemar_exact_matches_hand_computed_values() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 0) == pytest.approx(2 / 8)  # 2 * P(X <= 0), X ~ Bin(3, 1/2)
    assert mcnemar_exact(18, 5) == pytest.approx(0.0106, abs=1e-4)  # README's seed-0 row of the old demo


def test_band_is_a_student_t_interval_over_seeds() -> None:
    mean, low, high = band([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(4.303 * 0.1 / 3**0.5)
    assert band([0.5]) == (0.5, 0.5, 0.5)


def test_no_files_means_the_table_is_pending(tmp_path: Path) -> None:
    text = table(load_records(tmp_path), tmp_path)
    assert "pending" in text and "|" not in text


def test_the_table_lists_exactly_the_files_with_the_band_first(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "demo",
        [
            evidence(1, [True, False, False, False], [True, True, True, False], control=(3, 3)),
            evidence(0, [False, False, True, True], [True, True, True, False]),
        ],
    )
    text = table(load_records(folder), folder)
    lines = text.splitlines()
    assert lines[0].startswith(
        "**Across seeds**: held-out success changed by +0.375 on average over 2 run(s)"
    )
    rows = [line for line in lines if line.startswith("| 0 ") or line.startswith("| 1 ")]
    assert len(rows) == 2 and rows[0].startswith("| 0 | demo-seed0")  # sorted by seed
    assert lines[2] == (
        "**Sharpening control** (the base and the trained model at T=0.3 on the same tasks): success changed "
        "by +0.000 on average over 1 run(s), 95% t-band over seeds [+0.000, +0.000]."
    )  # only seed 1 has a control, which did not move
    assert "| 2 / 1 |" in rows[0] and "not measured" in rows[0]
    assert "| 2 / 0 |" in rows[1] and "3/4 (0.750) (T=0.3) | 3/4 (0.750) |" in rows[1]


def test_replace_block_keeps_the_text_around_the_markers() -> None:
    text = f"intro\n{START}\nold table\n{END}\noutro\n"
    assert replace_block(text, "new") == f"intro\n{START}\nnew\n{END}\noutro\n"


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


def test_the_benchmarks_page_block_is_the_table_of_the_committed_files() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    block = page.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == table(load_records(ROOT / "studies" / "calc-demo" / "results" / "demo"))
