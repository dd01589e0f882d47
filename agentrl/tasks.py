"""Task records from `tasks/<suite>/<split>.jsonl`, and the sampler that draws them for training steps.

What this is: reading JSONL task files (one JSON object per line, each with a unique "id") and drawing
deterministic batches of them. What this is not: task generation (each env plugin ships its own generator
script) or validation of a task's fields (the env validates the task it is given in `reset`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import ConfigError

Task = Mapping[str, Any]


def load_tasks(root: str | Path, suite: str, split: str) -> list[Task]:
    """All task records of one split, in file order."""
    path = Path(root) / suite / f"{split}.jsonl"
    if not path.is_file():
        raise ConfigError(f"task file {path} not found; check tasks.suite / tasks.*_split in the config")
    tasks = [_parse_line(line, path, number) for number, line in enumerate(path.open(), 1) if line.strip()]
    if not tasks:
        raise ConfigError(f"task file {path} is empty")
    return tasks


def _parse_line(line: str, path: Path, number: int) -> Task:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
    if not isinstance(record, dict) or "id" not in record:
        raise ConfigError(f"{path}:{number}: a task must be a JSON object with an 'id'")
    return record


def sample_tasks(tasks: list[Task], count: int, seed: int, step: int) -> list[Task]:
    """`count` distinct tasks for training step `step`, the same for the same (seed, step)."""
    if count > len(tasks):
        raise ConfigError(f"asked for {count} tasks per step but the split has only {len(tasks)}")
    rng = np.random.default_rng((seed, step))
    return [tasks[i] for i in rng.choice(len(tasks), size=count, replace=False)]
