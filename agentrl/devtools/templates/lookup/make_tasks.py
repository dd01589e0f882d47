"""The envname task suite: small "key = value" files and which key to look up, split by a stable hash.

What this is: a pure, deterministic generator, and the script that writes the suite into this package:

    python -m agentrl_envname.make_tasks     # writes agentrl_envname/data/tasks/envname/{train,heldout}.jsonl

Candidate i of a seed comes from `random.Random(f"{seed}:{i}")`, so every task is reproducible on its own;
its split is a hash of its id, so train and heldout are disjoint by construction. The files of the env's
few-shot examples (example.txt, demo.cfg) are in no split.

What this is not: the env, which checks every task it is given in `reset`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KEYS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
WORDS = ("amber", "basil", "cedar", "dune", "ember", "fern", "glade", "harbor", "iris", "juniper")
FILES = ("inventory.txt", "settings.txt", "labels.txt")
COUNTS = {"train": 400, "heldout": 100}
HELDOUT_PERCENT = 20
SUITE_DIR = Path(__file__).resolve().parent / "data" / "tasks" / "envname"


def make_task(rng: random.Random) -> dict[str, Any]:
    """One task: a file of four "key = value" lines and the key whose value is the answer."""
    keys = rng.sample(KEYS, 4)
    values = [f"{rng.choice(WORDS)}{rng.randint(10, 99)}" for _ in keys]
    file = rng.choice(FILES)
    content = "".join(f"{key} = {value}\n" for key, value in zip(keys, values, strict=True))
    index = rng.randrange(len(keys))
    digest = hashlib.sha256(f"{file}\0{content}\0{keys[index]}".encode()).hexdigest()
    return {"id": f"envname-{digest[:12]}", "file": file, "content": content, "key": keys[index],
            "answer": values[index]}  # fmt: skip


def split_of(task_id: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of task ids, else 'train'."""
    digest = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if digest % 100 < HELDOUT_PERCENT else "train"


def generate(split: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """The first `count` distinct tasks of `split` among the seed's candidates."""
    tasks: dict[str, dict[str, Any]] = {}
    index = 0
    while len(tasks) < count:
        task = make_task(random.Random(f"{seed}:{index}"))
        index += 1
        if split_of(task["id"]) == split:
            tasks.setdefault(task["id"], task)
    return list(tasks.values())


def write_suite(out: Path, seed: int = 0) -> dict[str, int]:
    """Write `<out>/train.jsonl` and `<out>/heldout.jsonl`; return how many tasks each got."""
    out.mkdir(parents=True, exist_ok=True)
    for split, count in COUNTS.items():
        lines = "".join(json.dumps(task) + "\n" for task in generate(split, count, seed))
        (out / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    return dict(COUNTS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the envname task suite (train and heldout).")
    parser.add_argument("--out", type=Path, default=SUITE_DIR, help="output folder")
    args = parser.parse_args(argv)
    print(f"wrote {write_suite(args.out)} tasks to {args.out}")


if __name__ == "__main__":
    main()
