"""The envname task suite: every (high, target) pair, split into train and heldout by a stable hash.

What this is: a pure, deterministic generator, and the script that writes the suite into this package:

    python -m agentrl_envname.make_tasks     # writes agentrl_envname/data/tasks/envname/{train,heldout}.jsonl

A task's split is a hash of its id, so train and heldout stay disjoint whatever else changes. The ranges
of the env's few-shot examples (1-10 and 1-6) are in no split.

What this is not: the env, which checks every task it is given in `reset`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HIGHS = (8, 16, 24, 32, 48, 63)  # binary search needs at most 6 guesses for each (2**6 - 1 = 63)
HELDOUT_PERCENT = 20
SPLITS = ("train", "heldout")
SUITE_DIR = Path(__file__).resolve().parent / "data" / "tasks" / "envname"


def make_task(high: int, target: int) -> dict[str, Any]:
    return {"id": f"envname-{high}-{target}", "high": high, "target": target}


def split_of(task_id: str) -> str:
    """'heldout' for a stable HELDOUT_PERCENT of task ids, else 'train'."""
    digest = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if digest % 100 < HELDOUT_PERCENT else "train"


def all_tasks() -> list[dict[str, Any]]:
    return [make_task(high, target) for high in HIGHS for target in range(1, high + 1)]


def write_suite(out: Path) -> dict[str, int]:
    """Write `<out>/train.jsonl` and `<out>/heldout.jsonl`; return how many tasks each got."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in SPLITS:
        tasks = [task for task in all_tasks() if split_of(task["id"]) == split]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
        counts[split] = len(tasks)
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the envname task suite (train and heldout).")
    parser.add_argument("--out", type=Path, default=SUITE_DIR, help="output folder")
    args = parser.parse_args(argv)
    print(f"wrote {write_suite(args.out)} tasks to {args.out}")


if __name__ == "__main__":
    main()
