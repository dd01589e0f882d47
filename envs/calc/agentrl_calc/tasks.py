"""Deterministic arithmetic tasks for the calc env, and the script that writes `tasks/calc/`.

What this is: a pure generator. Candidate problem i of a seed comes from `numpy.random.default_rng((seed,
i))`, so every problem is reproducible on its own; a problem's split is a stable hash of its question text,
so train and heldout are disjoint by construction whatever the counts. Shapes, by level:
    1: a * b            (a: 3 digits, b: 2 digits)
    2: a * b + c        (c: 2-3 digits)
    3: a * b - c * d    (a, c: 3 digits; b, d: 2 digits)
Products of this size are beyond a 135M model's mental arithmetic and trivial with the python tool.

What this is not: the env (see `agentrl_calc.env`) or a task sampler for training (see `agentrl.tasks`).

    python -m agentrl_calc.tasks --out tasks/calc
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

GENERATOR_VERSION = 1
HELDOUT_PERCENT = 20
SPLITS = ("train", "heldout")
LEVELS = (1, 2, 3)
MAX_CANDIDATES_PER_TASK = 100  # the problem space is ~10^7, so duplicates are rare; this only bounds a bug


def question_digest(question: str) -> str:
    return hashlib.sha256(question.encode("utf-8")).hexdigest()


def split_of(question: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of all questions, else 'train'."""
    return "heldout" if int(question_digest(question)[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def make_problem(rng: np.random.Generator) -> tuple[int, str, int]:
    """(level, expression, value) of one random problem."""
    level = int(rng.integers(1, len(LEVELS) + 1))
    a, b = int(rng.integers(100, 1000)), int(rng.integers(10, 100))
    if level == 1:
        return level, f"{a} * {b}", a * b
    if level == 2:
        c = int(rng.integers(10, 1000))
        return level, f"{a} * {b} + {c}", a * b + c
    c, d = int(rng.integers(100, 1000)), int(rng.integers(10, 100))
    return level, f"{a} * {b} - {c} * {d}", a * b - c * d


def make_task(rng: np.random.Generator) -> dict[str, Any]:
    """One task record: {"id", "question", "answer", "split", "level"}."""
    level, expression, value = make_problem(rng)
    question = f"What is {expression}?"
    return {
        "id": f"calc-{question_digest(question)[:12]}",
        "question": question,
        "answer": str(value),
        "split": split_of(question),
        "level": level,
    }


def candidates(seed: int) -> Iterator[dict[str, Any]]:
    index = 0
    while True:
        yield make_task(np.random.default_rng((seed, index)))
        index += 1


def generate_tasks(split: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """The first `count` distinct tasks of `split` among the seed's candidates; deterministic."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, task in enumerate(candidates(seed)):
        if len(tasks) == count:
            break
        if index > MAX_CANDIDATES_PER_TASK * (count + 10):
            raise RuntimeError(f"could not find {count} distinct {split} tasks; is HELDOUT_PERCENT 0 or 100?")
        if task["split"] == split and task["question"] not in seen:
            seen.add(task["question"])
            tasks.append(task)
    return tasks


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> str:
    """Write one JSON object per line; returns the file's sha256."""
    text = "".join(json.dumps(record) + "\n" for record in records)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_task_files(out: Path, train_count: int, heldout_count: int, seed: int) -> dict[str, Any]:
    """Write train.jsonl, heldout.jsonl and manifest.json under `out`; returns the manifest."""
    header = {
        "suite": "calc",
        "env_id": "agentrl/Calc-v0",
        "generator": "agentrl_calc.tasks",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
    }
    counts = {"train": train_count, "heldout": heldout_count}
    return write_suite(out, counts, lambda split, n: generate_tasks(split, n, seed), header)


def write_suite(
    out: Path,
    counts: dict[str, int],
    generate: Callable[[str, int], list[dict[str, Any]]],
    header: dict[str, Any],
) -> dict[str, Any]:
    """Write `generate(split, count)` as `<split>.jsonl` for each split of `counts` under `out`, then
    manifest.json: `header`, the held-out share, the counts and each file's sha256; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    hashes = {split: write_jsonl(out / f"{split}.jsonl", generate(split, n)) for split, n in counts.items()}
    manifest = {
        **header,
        "heldout_percent": HELDOUT_PERCENT,
        "counts": counts,
        "sha256": {f"{split}.jsonl": digest for split, digest in hashes.items()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the calc task files (train, heldout, manifest).")
    parser.add_argument("--out", type=Path, default=Path("tasks/calc"), help="output directory")
    parser.add_argument("--train-count", type=int, default=2000)
    parser.add_argument("--heldout-count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    manifest = write_task_files(args.out, args.train_count, args.heldout_count, args.seed)
    print(f"wrote {manifest['counts']} tasks to {args.out}")


if __name__ == "__main__":
    main()
