"""The calc task generator: deterministic, split-disjoint, and the committed files match it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from agentrl_calc.env import CalcEnv, is_correct, normalize_answer
from agentrl_calc.tasks import generate_tasks, make_task, split_of, write_task_files


def _questions(tasks: list[dict]) -> set[str]:
    return {task["question"] for task in tasks}


def test_generation_is_deterministic() -> None:
    assert generate_tasks("train", 50, seed=3) == generate_tasks("train", 50, seed=3)
    assert generate_tasks("train", 50, seed=3) != generate_tasks("train", 50, seed=4)


def test_candidates_depend_only_on_seed_and_index() -> None:
    first = make_task(np.random.default_rng((0, 7)))
    assert first == make_task(np.random.default_rng((0, 7)))
    assert first["split"] == split_of(first["question"])


def test_splits_are_disjoint_and_distinct() -> None:
    train, heldout = generate_tasks("train", 1000), generate_tasks("heldout", 200)
    assert len(_questions(train)) == 1000 and len(_questions(heldout)) == 200
    assert not _questions(train) & _questions(heldout)
    assert {task["split"] for task in train} == {"train"}
    assert {task["split"] for task in heldout} == {"heldout"}


def test_answers_are_the_value_of_the_question() -> None:
    for task in generate_tasks("train", 100):
        expression = task["question"].removeprefix("What is ").removesuffix("?")
        assert int(task["answer"]) == eval(expression)  # our own generated arithmetic, nothing else
        assert task["level"] in (1, 2, 3)


def test_heldout_share_is_about_a_fifth() -> None:
    tasks = [make_task(np.random.default_rng((0, index))) for index in range(2000)]
    share = sum(task["split"] == "heldout" for task in tasks) / len(tasks)
    assert 0.16 < share < 0.24


def test_unknown_split_is_rejected() -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        generate_tasks("test", 1)


def test_committed_task_files_match_the_generator(repo_root: Path, tmp_path: Path) -> None:
    committed = repo_root / "tasks" / "calc"
    manifest = json.loads((committed / "manifest.json").read_text())
    regenerated = write_task_files(
        tmp_path, manifest["counts"]["train"], manifest["counts"]["heldout"], manifest["seed"]
    )
    assert regenerated == manifest
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (tmp_path / name).read_text() == (committed / name).read_text()


def test_the_example_questions_are_in_no_split(repo_root: Path) -> None:
    user_messages = [message["content"] for message in CalcEnv.examples if message["role"] == "user"]
    for name in ("train.jsonl", "heldout.jsonl"):
        lines = (repo_root / "tasks" / "calc" / name).read_text().splitlines()
        questions = [json.loads(line)["question"] for line in lines]
        assert not any(question in message for question in questions for message in user_messages)


@pytest.mark.parametrize(
    ("answer", "expected", "correct"),
    [
        ("1234", "1234", True),
        (" 1,234 ", "1234", True),
        ("1234.0", "1234", True),
        ("-7840", "-7840", True),
        ("1235", "1234", False),
        ("about 1234", "1234", False),
        ("", "1234", False),
        ("nan", "1234", False),
    ],
)
def test_answer_normalisation(answer: str, expected: str, correct: bool) -> None:
    assert is_correct(answer, expected) is correct


def test_non_numbers_normalise_to_none() -> None:
    assert normalize_answer("twelve") is None
    assert normalize_answer("inf") is None
