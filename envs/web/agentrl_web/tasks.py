"""Task records of the web envs, and the script that writes `tasks/web-miniwob/` and `tasks/web-shop/`.

What this is: the curated MiniWoB++ tasks (ones whose goal and controls are all visible in the text
rendering: no canvas, drag or pixel positions), and seeds split by range: train seeds count up from 0,
held-out seeds from HELDOUT_SEED_BASE, so the splits are disjoint by construction. A MiniWoB record is
{"id", "task", "seed", "split"}; a shop record is {"id", "seed", "instruction", "split"} (the instruction is
informative; the env derives everything from the seed).

What this is not: the env (`agentrl_web.env`) or a sampler (`agentrl.tasks`).

    python -m agentrl_web.tasks --out tasks
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from agentrl_web.shop import make_shop

MINIWOB_TASKS = (
    "click-button",
    "click-link",
    "click-dialog",
    "click-checkboxes",
    "click-option",
    "choose-list",
    "enter-text",
    "enter-password",
    "focus-text",
    "login-user",
)
HELDOUT_SEED_BASE = 1_000_000
GENERATOR_VERSION = 1


def miniwob_task(task: str, seed: int, split: str) -> dict[str, Any]:
    return {"id": f"miniwob-{task}-{seed}", "task": task, "seed": seed, "split": split}


def shop_task(seed: int, split: str) -> dict[str, Any]:
    _, goal = make_shop(seed)
    return {"id": f"shop-{seed}", "seed": seed, "instruction": goal.instruction(), "split": split}


def generate(family: str, split: str, count: int) -> list[dict[str, Any]]:
    base = 0 if split == "train" else HELDOUT_SEED_BASE
    if family == "miniwob":  # round-robin over the tasks, so every prefix is balanced
        return [
            miniwob_task(MINIWOB_TASKS[i % len(MINIWOB_TASKS)], base + i // len(MINIWOB_TASKS), split)
            for i in range(count)
        ]
    if family == "shop":
        return [shop_task(base + i, split) for i in range(count)]
    raise ValueError(f"unknown web task family {family!r}; use miniwob or shop")


def draw_task(family: str, rng: np.random.Generator) -> dict[str, Any]:
    """A train task drawn from `rng` (what reset does without options['task'])."""
    seed = int(rng.integers(HELDOUT_SEED_BASE))
    if family == "miniwob":
        return miniwob_task(MINIWOB_TASKS[int(rng.integers(len(MINIWOB_TASKS)))], seed, "train")
    return shop_task(seed, "train")


def write_suite(out: Path, family: str, train: int, heldout: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    digests = {}
    for split, count in (("train", train), ("heldout", heldout)):
        text = "".join(json.dumps(record) + "\n" for record in generate(family, split, count))
        (out / f"{split}.jsonl").write_text(text)
        digests[f"{split}.jsonl"] = hashlib.sha256(text.encode()).hexdigest()
    manifest = {
        "suite": out.name,
        "env_id": "agentrl/WebMiniWob-v0" if family == "miniwob" else "agentrl/WebShop-v0",
        "generator": "agentrl_web.tasks",
        "generator_version": GENERATOR_VERSION,
        "heldout_seed_base": HELDOUT_SEED_BASE,
        "counts": {"train": train, "heldout": heldout},
        "sha256": digests,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("tasks"))
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--heldout", type=int, default=100)
    args = parser.parse_args(argv)
    write_suite(args.out / "web-miniwob", "miniwob", args.train, args.heldout)
    write_suite(args.out / "web-shop", "shop", args.train, args.heldout)


if __name__ == "__main__":
    main()
