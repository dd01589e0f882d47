"""Task records from `tasks/<suite>/<split>.jsonl`, the uniform draw of a training step's tasks, and the
typed options of the task samplers.

What this is: finding a suite's folder (`resolve_suite`: `./tasks/<suite>/`, else the suite an installed env
plugin ships), reading JSONL task files (one JSON object per line, each with a unique "id"), drawing
deterministic uniform batches of them (`sample_tasks`, the `uniform` sampler), and `FilterConfig` /
`AdaptiveConfig`, the options of the `filtered` and `adaptive` samplers (`tasks.filter.*`,
`tasks.adaptive.*`; they live here, next to the data they draw from, so `agentrl.config` stays light).
What this is not: the samplers that play and select groups (`agentrl/trainer/task_sampling.py`), task
generation (each env plugin ships its own generator script) or validation of a task's fields (the env
validates the task it is given in `reset`). `task_source` says which file and line a loaded task came
from (a side table keyed by task id, so the records sent to envs stay exactly the file's objects).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import ConfigError

Task = Mapping[str, Any]

SAMPLERS = ("uniform", "filtered", "adaptive")
"""The values of `tasks.sampler` (see `agentrl/trainer/task_sampling.py`)."""

_SOURCES: dict[str, str] = {}  # task id -> "path:line" of the last file `load_tasks` read it from


@dataclass(frozen=True)
class FilterConfig:
    """`tasks.sampler=filtered` (DAPO's dynamic sampling): groups whose returns are all equal are dropped and
    extra groups are played, in rounds, until `train.tasks_per_step` informative groups are kept.

    budget: at most floor(budget x tasks_per_step) extra groups per step (0: never play more than uniform
            would; the step then trains on uniform's groups). When the budget is spent, the step is filled
            with the earliest dropped groups (reason "filler").
    """

    budget: float = 2.0

    def __post_init__(self) -> None:
        if self.budget < 0:
            raise ValueError(
                f"tasks.filter.budget must be >= 0 (extra groups per tasks_per_step), got {self.budget}"
            )


@dataclass(frozen=True)
class AdaptiveConfig:
    """`tasks.sampler=adaptive`: a Beta(alpha, beta) posterior of each task's success rate, updated from the
    successes and failures of every group played, and tasks drawn for their expected signal p(1-p).

    prior: (alpha, beta) of every task before it is played; Beta(1, 1) is uniform on the success rate.
    exploration: the fraction of each step's slots (rounded down) given to tasks drawn uniformly at random
            from those the posterior did not pick, so the draw never narrows to a few tasks.
    """

    prior: tuple[float, float] = (1.0, 1.0)
    exploration: float = 0.25

    def __post_init__(self) -> None:
        valid = isinstance(self.prior, tuple) and len(self.prior) == 2
        if not valid or not all(isinstance(x, int | float) and x > 0 for x in self.prior):
            raise ValueError(
                f"tasks.adaptive.prior must be two positive numbers [alpha, beta], got {self.prior!r}"
            )
        if not 0.0 <= self.exploration <= 1.0:
            raise ValueError(f"tasks.adaptive.exploration must be in [0, 1], got {self.exploration}")


def resolve_suite(root: str | Path, suite: str) -> Path:
    """The folder of a task suite: the first of

    1. `<root>/<suite>/` (`tasks.root`, by default `tasks`, i.e. `./tasks/<suite>/` in the working directory),
       when that folder exists;
    2. `data/tasks/<suite>/` of the installed env plugin that ships the suite (`agentrl.env.plugin_data`).

    The same order as the run config's (`agentrl.config.resolve_config_path`): the working directory wins.
    """
    from agentrl.env.plugin_data import shipped_suite

    local = Path(root) / suite
    if local.is_dir():
        return local
    shipped = shipped_suite(suite)
    if shipped is not None:
        return shipped
    raise ConfigError(
        f"task suite {suite!r} not found: no folder {local} and no installed env plugin ships it; check "
        "tasks.suite / tasks.root in the config, or `agentrl envs list` for the suites plugins ship"
    )


def load_tasks(root: str | Path, suite: str, split: str) -> list[Task]:
    """All task records of one split (`<split>.jsonl` in the folder `resolve_suite` finds), in file order."""
    path = task_file(root, suite, split)
    if not path.is_file():
        raise ConfigError(f"task file {path} not found; check tasks.suite / tasks.*_split in the config")
    with path.open() as lines_of_file:
        numbered = [(number, line) for number, line in enumerate(lines_of_file, 1) if line.strip()]
    tasks = [_parse_line(line, path, number) for number, line in numbered]
    if not tasks:
        raise ConfigError(f"task file {path} is empty")
    lines = (number for number, _ in numbered)
    _SOURCES.update({str(task["id"]): f"{path}:{line}" for task, line in zip(tasks, lines, strict=True)})
    return tasks


def task_file(root: str | Path, suite: str, split: str) -> Path:
    """The file `load_tasks` reads for this split: in `./tasks/` or in an installed plugin's data."""
    return resolve_suite(root, suite) / f"{split}.jsonl"


def task_source(task_id: Any) -> str | None:
    """`path:line` of the task with this id in the task file it was loaded from (None for a task no
    `load_tasks` call read, e.g. one built in code)."""
    return _SOURCES.get(str(task_id))


def describe_task(task: Mapping[str, Any]) -> str:
    """A task as an error message names it: its id and, when it was loaded from a file, the file and line."""
    source = task_source(task.get("id"))
    return f"task {task.get('id')!r}" + (f" ({source})" if source else "")


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
