"""Read-side views of the run store shared by `agentrl runs` and `agentrl ui`: pure functions over the plain
dicts `agentrl.store.repository` returns.

What this is: finding a run by id, id prefix or name; metric series and summaries; per-step episode
statistics; the filters of the viewer (failed episodes, infrastructure failures, invalid actions); the
anchor groups of turns (GiGPO's: turns of the same task group taken in the same state); and per turn one
line on what its prompt held under a context policy and where a new token segment starts.

What this is not: a store reader. It never opens a database; callers pass what `list_runs`,
`load_metrics` and `load_episodes` returned. The first observation (the task prompt as the env showed it)
and each turn's env info (for sandboxed envs the exec results: exit code, timeout, OOM, duration) come from
the store; of the first prompt the store keeps its inputs (the env's tools and few-shot examples,
`analysis.episode_prompt` shows them), not the rendered text, only its token count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.errors import ConfigError

HELD_OUT_SUCCESS = "eval/success_rate"
EpisodeFilter = Literal["all", "failed", "infra", "invalid"]
FILTERS: tuple[EpisodeFilter, ...] = ("all", "failed", "infra", "invalid")


@dataclass(frozen=True)
class MetricSummary:
    """One metric over a run: how many steps have it, its first, last, min and max finite values."""

    name: str
    count: int
    first: float | None
    last: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class StepSummary:
    """One (step, split) of a run: its episode count, mean reward, success rate and failure counts."""

    step: int
    split: str
    episodes: int
    mean_reward: float
    success_rate: float
    infra_failures: int
    invalid_turns: int


def find_run(runs: Sequence[Mapping[str, Any]], ref: str) -> Mapping[str, Any]:
    """The run whose id or name is `ref`, else the only one whose id starts with it."""
    exact = [run for run in runs if ref in (run["id"], run["name"])]
    if exact:
        return exact[0]
    prefixed = [run for run in runs if str(run["id"]).startswith(ref)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        raise ConfigError(
            f"run {ref!r} is ambiguous ({len(prefixed)} ids start with it); give more of the id"
        )
    raise ConfigError(f"no run {ref!r} in the store; `agentrl runs ls` lists the runs (by id and name)")


def metric_series(metrics: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """{name: [(step, value), ...]} in step order, NULL (non-finite) values left out."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in metrics:
        value = row["value"]
        if value is not None and math.isfinite(value):
            series[row["name"]].append((int(row["step"]), float(value)))
    return {name: sorted(points) for name, points in series.items()}


def summarise_metrics(series: Mapping[str, Sequence[tuple[int, float]]]) -> list[MetricSummary]:
    """One summary per metric, by name."""
    summaries = []
    for name in sorted(series):
        values = [value for _, value in series[name]]
        summaries.append(
            MetricSummary(name, len(values), values[0], values[-1], min(values), max(values))
            if values
            else MetricSummary(name, 0, None, None, None, None)
        )
    return summaries


def last_step(metrics: Iterable[Mapping[str, Any]]) -> int | None:
    """The highest step any metric was recorded at (None for a run with no metrics yet)."""
    steps = [int(row["step"]) for row in metrics]
    return max(steps) if steps else None


def best_value(
    series: Mapping[str, Sequence[tuple[int, float]]], name: str = HELD_OUT_SUCCESS
) -> float | None:
    """The highest value of one metric (by default the held-out success rate), None if never recorded."""
    points = series.get(name, [])
    return max(value for _, value in points) if points else None


def step_summaries(episodes: Iterable[Mapping[str, Any]]) -> list[StepSummary]:
    """Per (step, split), in step order, train before eval."""
    by_step: dict[tuple[int, str], list[Mapping[str, Any]]] = defaultdict(list)
    for episode in episodes:
        by_step[(int(episode["step"]), str(episode["split"]))].append(episode)
    return [_step_summary(step, split, rows) for (step, split), rows in sorted(by_step.items())]


def _step_summary(step: int, split: str, episodes: Sequence[Mapping[str, Any]]) -> StepSummary:
    usable = [episode for episode in episodes if not is_infra_failure(episode)]
    return StepSummary(
        step=step,
        split=split,
        episodes=len(episodes),
        mean_reward=_mean([float(episode["reward"]) for episode in usable]),
        success_rate=_mean([float(bool(episode["success"])) for episode in usable]),
        infra_failures=len(episodes) - len(usable),
        invalid_turns=sum(invalid_turns(episode) for episode in episodes),
    )


def is_infra_failure(episode: Mapping[str, Any]) -> bool:
    return episode["stop_reason"] == "infra_error"


def invalid_turns(episode: Mapping[str, Any]) -> int:
    return sum(1 for turn in episode["turns"] if turn["invalid"])


def keep(episode: Mapping[str, Any], which: EpisodeFilter) -> bool:
    """Whether an episode passes a viewer filter: failed (not successful, infra failures included),
    infra (ended by an infrastructure failure), invalid (has an unparseable turn)."""
    if which == "failed":
        return not episode["success"]
    if which == "infra":
        return is_infra_failure(episode)
    if which == "invalid":
        return invalid_turns(episode) > 0
    return True


def group_by_task(episodes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Episodes by task group id, groups in first-seen order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for episode in episodes:
        groups.setdefault(str(episode["group_id"]), []).append(episode)
    return groups


@dataclass(frozen=True)
class TurnRef:
    """A turn of a stored episode: the episode's row id and the turn index."""

    episode: int
    turn: int


def state_before(episode: Mapping[str, Any], turn_index: int) -> str | None:
    """The state key a turn was taken in: the previous turn's state key, or for turn 0 the episode's
    initial state key (None in stores written before it was kept)."""
    if turn_index <= 0:
        return episode.get("initial_state_key")  # type: ignore[no-any-return]
    return episode["turns"][turn_index - 1]["state_key"]  # type: ignore[no-any-return]


def anchor_groups(episodes: Iterable[Mapping[str, Any]]) -> dict[TurnRef, list[TurnRef]]:
    """Every turn's anchor group: the turns of the same task group and split taken in the same state
    (including itself). A turn whose state is unknown (None) is alone, as in `agentrl.credit.segments`."""
    buckets: dict[Hashable, list[TurnRef]] = defaultdict(list)
    refs: dict[TurnRef, Hashable] = {}
    for episode in episodes:
        for turn in episode["turns"]:
            ref = TurnRef(int(episode["id"]), int(turn["index"]))
            key = state_before(episode, ref.turn)
            bucket: Hashable = ref if key is None else (episode["split"], episode["group_id"], key)
            buckets[bucket].append(ref)
            refs[ref] = bucket
    return {ref: buckets[bucket] for ref, bucket in refs.items()}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def turn_spans(indices: Iterable[int]) -> str:
    """Turn indices as runs of consecutive ones: [0, 1, 2, 5] -> "turns 0–2, 5"; [4] -> "turn 4"."""
    ordered = sorted(set(indices))
    spans: list[str] = []
    start = previous = None
    for index in [*ordered, None]:
        if previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            spans.append(str(start) if start == previous else f"{start}–{previous}")
        start = previous = index
    return ("turn " if len(ordered) == 1 else "turns ") + ", ".join(spans)


STATE_CHARS = 60  # of a window's state line, in the per-turn prompt line


def prompt_view_text(view: Mapping[str, Any]) -> str:
    """What a stored `prompt_view` (`agentrl.agent.context.next_prompt`) says the prompt held, short: e.g.
    "prompt: window — task from turn 3's observation; turns 4–5 shown"."""
    parts = []
    if view.get("task_turn") is not None:
        parts.append(f"task from turn {view['task_turn']}'s observation")
    if view.get("summary_turn") is not None:
        parts.append(f"summary written at turn {view['summary_turn']}")
    shown = view.get("shown") or []
    masked = view.get("masked") or []
    shown_text = f"{turn_spans(shown)} shown" if shown else "no earlier turn shown"
    if masked:
        shown_text += f", outputs of {turn_spans(masked)} masked"
    parts.append(shown_text)
    state = str(view.get("state_text") or "")
    if state:
        parts.append(f"state line “{state if len(state) <= STATE_CHARS else state[:STATE_CHARS] + '…'}”")
    return f"prompt: {view.get('policy', '?')} — " + "; ".join(parts)


def context_lines(turns: Sequence[Mapping[str, Any]], segment_before: int | None) -> dict[int, str]:
    """Per turn of an episode page (consecutive turns, from `pages.load_episode`), one line saying what its
    prompt held under a context policy (its `prompt_view`) and, where the turn starts a new token segment
    (its segment differs from the turn before's; `segment_before` is the segment of the turn before the
    page's first, None at turn 0, whose segment 0 is not new), "new token segment N"; the token segment
    after a view's text otherwise. Turns with neither (a `full` context) get no line."""
    lines: dict[int, str] = {}
    previous = segment_before
    for turn in turns:
        segment = int(turn.get("segment") or 0)
        new = segment != (0 if previous is None else previous)
        view = turn.get("prompt_view")
        if view:
            lines[int(turn["index"])] = (
                f"{prompt_view_text(view)} · {'new ' if new else ''}token segment {segment}"
            )
        elif new:
            lines[int(turn["index"])] = f"new token segment {segment}"
        previous = segment
    return lines
