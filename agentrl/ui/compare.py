"""Comparing runs and evaluations: key config columns, a config diff, and held-out results per task.

What this is: pure functions over saved run configs (the resolved `RunConfig` as plain data, as `agentrl
train` saves it) and the episode dicts of the run store.

- `key_columns(config)`: model, estimator, eval temperature and group size, for the runs list.
- `config_diff(configs)`: the dotted keys whose values differ between runs, with each run's value.
- `last_values(series)`: each metric's last logged value in each run, for the compare page's table.
- `task_outcomes(episodes)`, `pair_tasks(a, b)`, `paired_counts(pairs)`: one evaluation step against
  another, task by task. A task is *solved* when more than half of its scored episodes succeeded (the
  held-out evaluation plays one episode per task, so: when that episode succeeded); an infrastructure
  failure is not scored. Pairs are "both" solved, "gained" (solved only in B), "lost" (only in A),
  "neither", or "unpaired" (missing or unscored on one side).

What this is not: a statistic. It counts; `agentrl study report` (`agentrl.study.report`) does the
inference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.ui import views

KEY_COLUMNS = {
    "model": "model.name",
    "estimator": "credit.estimator",
    "eval_temperature": "eval.temperature",
    "group_size": "train.group_size",
}
"""The runs list's config columns and where each lives in the saved config."""

Change = Literal["both", "gained", "lost", "neither", "unpaired"]
CHANGES: tuple[Change, ...] = ("both", "gained", "lost", "neither", "unpaired")
MISSING = object()


def dig(config: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted path of a nested mapping, or `MISSING`."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def key_columns(config: Mapping[str, Any]) -> dict[str, Any]:
    """The KEY_COLUMNS values of one saved config (None where the config lacks one)."""
    values = {column: dig(config, path) for column, path in KEY_COLUMNS.items()}
    return {column: None if value is MISSING else value for column, value in values.items()}


def eval_temperature(config: Mapping[str, Any]) -> float | None:
    """The sampling temperature of the run's held-out evaluations (None when its config does not say)."""
    value = dig(config, "eval.temperature")
    return None if value is MISSING or value is None else float(value)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf value}; an empty mapping is a leaf (so `credit.options: {}` shows)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def config_diff(configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(dotted key, [value in each config, `MISSING` where absent]) for every key whose values differ."""
    flats = [flatten(config) for config in configs]
    keys = sorted({key for flat in flats for key in flat})
    rows = [(key, [flat.get(key, MISSING) for flat in flats]) for key in keys]
    return [(key, values) for key, values in rows if any(v != values[0] for v in values[1:])]


@dataclass(frozen=True)
class TaskOutcome:
    """One task in one evaluation: scored episodes (infrastructure failures left out), successes, and the
    mean raw reward of the scored ones."""

    scored: int
    successes: int
    reward: float

    @property
    def solved(self) -> bool:
        return self.scored > 0 and 2 * self.successes > self.scored


@dataclass(frozen=True)
class TaskPair:
    """One task's outcome in evaluation A and in B (None where it was not played) and the change."""

    task_id: str
    a: TaskOutcome | None
    b: TaskOutcome | None
    change: Change


def eval_steps(episodes: Iterable[Mapping[str, Any]]) -> list[int]:
    """The steps at which a run evaluated held-out tasks, in order."""
    return sorted({int(e["step"]) for e in episodes if e["split"] == "eval"})


def task_outcomes(episodes: Iterable[Mapping[str, Any]]) -> dict[str, TaskOutcome]:
    """Per task id, in first-seen order, the outcome of the given episodes (one evaluation step's)."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for episode in episodes:
        rows.setdefault(str(episode["task_id"]), []).append(episode)
    outcomes = {}
    for task_id, played in rows.items():
        scored = [e for e in played if not views.is_infra_failure(e)]
        rewards = [float(e["reward"]) for e in scored]
        outcomes[task_id] = TaskOutcome(
            len(scored),
            sum(bool(e["success"]) for e in scored),
            sum(rewards) / len(rewards) if rewards else 0.0,
        )
    return outcomes


def change(a: TaskOutcome | None, b: TaskOutcome | None) -> Change:
    """How a task's outcome changed from A to B."""
    if a is None or b is None or not a.scored or not b.scored:
        return "unpaired"
    if a.solved and b.solved:
        return "both"
    if a.solved:
        return "lost"
    return "gained" if b.solved else "neither"


def pair_tasks(a: Mapping[str, TaskOutcome], b: Mapping[str, TaskOutcome]) -> list[TaskPair]:
    """Every task of A (in A's order), then those only in B, with its change."""
    tasks = list(a) + [task for task in b if task not in a]
    return [TaskPair(task, a.get(task), b.get(task), change(a.get(task), b.get(task))) for task in tasks]


def paired_counts(pairs: Iterable[TaskPair]) -> dict[Change, int]:
    """How many tasks fall in each change (every key of CHANGES present)."""
    counts = dict.fromkeys(CHANGES, 0)
    for pair in pairs:
        counts[pair.change] += 1
    return counts


def solved_count(outcomes: Mapping[str, TaskOutcome]) -> tuple[int, int]:
    """(tasks solved, tasks scored) of one evaluation."""
    scored = [outcome for outcome in outcomes.values() if outcome.scored]
    return sum(outcome.solved for outcome in scored), len(scored)


def last_values(
    runs: Sequence[Mapping[str, Sequence[tuple[int, float]]]],
) -> list[tuple[str, list[tuple[int, float] | None]]]:
    """(metric, [(step, value) of its last point in each run's series, None where the run lacks it]) for
    every metric any run logged, by name."""
    names = sorted({name for series in runs for name in series})
    return [(name, [series[name][-1] if series.get(name) else None for series in runs]) for name in names]
