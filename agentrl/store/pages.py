"""The viewer's readers: each reads one page of what a viewer page shows, in SQL, and nothing more.

What this is: plain functions over a `repository.Store`, each one transaction, returning plain dicts (ORM
objects never leave `agentrl/store/`): runs with their last step and best held-out value, a run's per-step
table aggregated in SQL (through `ix_episodes_run_step_summary`, never touching turns), one step's task
groups or episodes, one episode with a range of its turns (and only those turns' sampled tokens), the
turn "stubs" (index, reward, advantage, state key, invalid flag: no text) that anchor groups and trees
need, search by task id and by turn text, and the run's episodes in batches for a streamed export. A
`Window` says which rows (offset, limit) and in which order; sort keys are checked against each reader's
`*_SORTS` before any SQL is built.

What this is not: fast text search. Searching turn text is a `LIKE` scan of the run's turns that stops at
the page's last match (no full-text index); it reports whether more matches follow, not how many.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Select, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session, undefer
from sqlalchemy.sql.elements import ColumnElement

from agentrl.errors import NotFound
from agentrl.store.models import EpisodeRow, MetricRow, Run, TurnRow
from agentrl.store.repository import Store, episode_dict, read, run_dict, turn_dict, turn_tokens

INFRA_ERROR = "infra_error"  # the stop reason of an episode ended by an infrastructure failure


@dataclass(frozen=True)
class Window:
    """Which rows of a listing to read: `limit` rows from `offset`, ordered by `sort` (a key of the
    reader's `*_SORTS`), descending when `descending`."""

    offset: int = 0
    limit: int = 50
    sort: str = ""
    descending: bool = False


def _order(sorts: Mapping[str, Sequence[Any]], window: Window, default: str) -> list[Any]:
    """The ORDER BY columns of a window; an unknown key is a NotFound naming the known ones."""
    key = window.sort or default
    if key not in sorts:
        raise NotFound(f"cannot sort by {key!r}; use one of {', '.join(sorts)}")
    return [column.desc() if window.descending else column.asc() for column in sorts[key]]


def _paged(statement: Select[Any], window: Window) -> Select[Any]:
    return statement.offset(window.offset).limit(window.limit)


# --- runs --------------------------------------------------------------------------------------------


def find_runs(store: Store, ref: str) -> list[dict[str, Any]]:
    """The runs `ref` may name: the id, the name, or ids starting with it; newest first (for
    `views.find_run`, which decides among them)."""

    def query(session: Session) -> list[dict[str, Any]]:
        statement = select(Run).where(
            or_(Run.id == ref, Run.name == ref, Run.id.startswith(ref, autoescape=True))
        )
        return [run_dict(run) for run in session.scalars(statement.order_by(Run.created_at.desc()))]

    return read(store, f"finding run {ref!r}", query)


def _last_step() -> Any:
    return select(func.max(MetricRow.step)).where(MetricRow.run_id == Run.id).scalar_subquery()


def _best(metric: str) -> Any:
    return (
        select(func.max(MetricRow.value))
        .where(MetricRow.run_id == Run.id, MetricRow.name == metric)
        .scalar_subquery()
    )


RUN_SORTS = ("created", "name", "task", "status", "steps", "best")


def runs_page(store: Store, window: Window, best_metric: str) -> tuple[list[dict[str, Any]], int]:
    """One page of runs (default: newest first), each with "last_step" (the highest step with a metric)
    and "best" (the highest value of `best_metric`); and how many runs there are."""
    last_step, best = _last_step().label("last_step"), _best(best_metric).label("best")
    sorts: dict[str, list[Any]] = {
        "created": [Run.created_at],
        "name": [Run.name],
        "task": [Run.task],
        "status": [Run.status],
        "steps": [last_step],
        "best": [best],
    }
    order = _order(sorts, window, "created")

    def query(session: Session) -> tuple[list[dict[str, Any]], int]:
        rows = session.execute(_paged(select(Run, last_step, best).order_by(*order, Run.id), window))
        runs = [{**run_dict(run), "last_step": step, "best": value} for run, step, value in rows]
        return runs, int(session.scalar(select(func.count()).select_from(Run)) or 0)

    return read(store, "listing runs", query)


# --- a run's steps -----------------------------------------------------------------------------------


def _usable() -> ColumnElement[bool]:
    return EpisodeRow.stop_reason != INFRA_ERROR


def _step_columns() -> list[Any]:
    usable = _usable()
    return [
        EpisodeRow.step.label("step"),
        EpisodeRow.split.label("split"),
        func.count().label("episodes"),
        func.avg(case((usable, EpisodeRow.reward))).label("mean_reward"),
        func.avg(case((usable, cast(EpisodeRow.success, Float)))).label("success_rate"),
        func.sum(case((usable, 0), else_=1)).label("infra_failures"),
        func.sum(EpisodeRow.invalid_turns).label("invalid_turns"),
    ]


STEP_SORTS = (
    "step",
    "split",
    "episodes",
    "mean_reward",
    "success_rate",
    "infra_failures",
    "invalid_turns",
)


def step_table(
    store: Store, run_id: str, window: Window, split: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """One page of the run's (step, split) rows: episodes, mean reward and success rate of the usable
    episodes (0.0 when none is), infrastructure failures, invalid turns; and how many rows there are."""
    columns = _step_columns()
    named = {column.name: column for column in columns}
    sorts = {key: [named[key]] for key in STEP_SORTS}
    sorts["step"] = [named["step"], named["split"]]
    order = _order(sorts, window, "step")
    where = [EpisodeRow.run_id == run_id] + ([EpisodeRow.split == split] if split else [])
    grouped = select(*columns).where(*where).group_by(EpisodeRow.step, EpisodeRow.split)

    def query(session: Session) -> tuple[list[dict[str, Any]], int]:
        rows = session.execute(_paged(grouped.order_by(*order, named["step"], named["split"]), window))
        total = session.scalar(select(func.count()).select_from(grouped.subquery()))
        return [_step_row(dict(row._mapping)) for row in rows], int(total or 0)

    return read(store, f"summarising the steps of run {run_id}", query)


def _step_row(row: dict[str, Any]) -> dict[str, Any]:
    out = row
    for key in ("mean_reward", "success_rate"):
        out[key] = float(out[key]) if out[key] is not None else 0.0
    return out


# --- one step ----------------------------------------------------------------------------------------

FILTERS = ("all", "failed", "infra", "invalid")


def _filter(which: str) -> list[ColumnElement[bool]]:
    """The SQL of a viewer filter (as `views.keep`): failed, infra, invalid, or all."""
    if which == "failed":
        return [EpisodeRow.success.is_(False)]
    if which == "infra":
        return [EpisodeRow.stop_reason == INFRA_ERROR]
    if which == "invalid":
        return [EpisodeRow.invalid_turns > 0]
    if which == "all":
        return []
    raise NotFound(f"unknown filter {which!r}; use one of {', '.join(FILTERS)}")


def _of_step(run_id: str, step: int, split: str) -> list[ColumnElement[bool]]:
    return [EpisodeRow.run_id == run_id, EpisodeRow.step == step, EpisodeRow.split == split]


def step_counts(store: Store, run_id: str, step: int, split: str) -> dict[str, int]:
    """How many of the step's episodes each filter keeps: {"all": ..., "failed": ..., ...}."""
    columns = [func.count().label("all")] + [
        func.sum(case((and_(*_filter(which)), 1), else_=0)).label(which) for which in FILTERS[1:]
    ]

    def query(session: Session) -> dict[str, int]:
        row = session.execute(select(*columns).where(*_of_step(run_id, step, split))).one()
        return {key: int(value or 0) for key, value in row._mapping.items()}

    return read(store, f"counting the episodes of run {run_id} step {step}", query)


GROUP_SORTS = ("order", "task", "reward")


def step_groups(
    store: Store, run_id: str, step: int, split: str, which: str, window: Window
) -> tuple[list[dict[str, Any]], int]:
    """One page of the step's task groups that hold an episode the filter keeps, each group's episodes
    all there (with turn stubs, see `turn_stubs`), in group order then id; and how many groups match.
    Group order: "order" (first recorded), "task" (task id) or "reward" (the group's mean reward)."""
    sorts: dict[str, list[Any]] = {
        "order": [func.min(EpisodeRow.id)],
        "task": [func.min(EpisodeRow.task_id)],
        "reward": [func.avg(EpisodeRow.reward)],
    }
    order = _order(sorts, window, "order")
    matching = (
        select(EpisodeRow.group_id)
        .where(*_of_step(run_id, step, split), *_filter(which))
        .group_by(EpisodeRow.group_id)
    )

    def query(session: Session) -> tuple[list[dict[str, Any]], int]:
        page = list(session.scalars(_paged(matching.order_by(*order, func.min(EpisodeRow.id)), window)))
        rows = session.scalars(
            select(EpisodeRow).where(*_of_step(run_id, step, split), EpisodeRow.group_id.in_(page))
        )
        episodes = sorted(rows, key=lambda row: (page.index(row.group_id), row.id))
        total = session.scalar(select(func.count()).select_from(matching.subquery()))
        return _with_stubs(session, episodes), int(total or 0)

    return read(store, f"loading the groups of run {run_id} step {step}", query)


EPISODE_SORTS = ("id", "task", "outcome", "reward", "turns", "invalid")


def _episode_sorts() -> dict[str, list[Any]]:
    return {
        "id": [EpisodeRow.id],
        "task": [EpisodeRow.task_id],
        "outcome": [EpisodeRow.success],
        "reward": [EpisodeRow.reward],
        "turns": [EpisodeRow.num_turns],
        "invalid": [EpisodeRow.invalid_turns],
    }


def step_episodes(
    store: Store, run_id: str, step: int, split: str, which: str, window: Window
) -> tuple[list[dict[str, Any]], int]:
    """One page of the step's episodes the filter keeps (no turns), sorted by a key of EPISODE_SORTS
    (default: id); and how many it keeps."""
    order = _order(_episode_sorts(), window, "id")
    where = [*_of_step(run_id, step, split), *_filter(which)]

    def query(session: Session) -> tuple[list[dict[str, Any]], int]:
        rows = session.scalars(
            _paged(select(EpisodeRow).where(*where).order_by(*order, EpisodeRow.id), window)
        )
        total = session.scalar(select(func.count()).select_from(EpisodeRow).where(*where))
        return [episode_dict(row, turns=False) for row in rows], int(total or 0)

    return read(store, f"loading the episodes of run {run_id} step {step}", query)


# --- one episode -------------------------------------------------------------------------------------

STUB_COLUMNS = ("index", "reward", "advantage", "state_key", "invalid")


def turn_stubs(session: Session, episode_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Per episode id, its turns in order as {"index", "reward", "advantage", "state_key", "invalid"}."""
    stubs: dict[int, list[dict[str, Any]]] = {episode_id: [] for episode_id in episode_ids}
    columns = [getattr(TurnRow, name) for name in STUB_COLUMNS]
    statement = (
        select(TurnRow.episode_id, *columns)
        .where(TurnRow.episode_id.in_(episode_ids))
        .order_by(TurnRow.episode_id, TurnRow.index)
    )
    for episode_id, *values in session.execute(statement):
        stubs[episode_id].append(dict(zip(STUB_COLUMNS, values, strict=True)))
    return stubs


def _with_stubs(session: Session, rows: Sequence[EpisodeRow]) -> list[dict[str, Any]]:
    stubs = turn_stubs(session, [row.id for row in rows])
    return [{**episode_dict(row, turns=False), "turns": stubs[row.id]} for row in rows]


def load_episode(
    store: Store, run_id: str, episode_id: int, first_turn: int = 0, turn_limit: int | None = None
) -> dict[str, Any] | None:
    """The episode (None if the run has no such id) with its turns `first_turn` .. `first_turn +
    turn_limit - 1` in full (all from `first_turn` when `turn_limit` is None), each with its "tokens"
    (`repository.turn_tokens`), and "segment_before": the token segment of turn `first_turn - 1` (None
    when the range starts at turn 0), so that the page can tell whether its first turn starts one."""

    def query(session: Session) -> dict[str, Any] | None:
        row = session.get(EpisodeRow, episode_id)
        if row is None or row.run_id != run_id:
            return None
        statement = (
            select(TurnRow)
            .where(TurnRow.episode_id == episode_id, TurnRow.index >= first_turn)
            .order_by(TurnRow.index)
            .limit(turn_limit)
            .options(
                undefer(TurnRow.token_pieces),
                undefer(TurnRow.token_logprobs),
                undefer(TurnRow.trainer_logprobs),
            )
        )
        turns = [{**turn_dict(t), "tokens": turn_tokens(t)} for t in session.scalars(statement)]
        before = None
        if first_turn > 0:
            previous = select(TurnRow.segment).where(
                TurnRow.episode_id == episode_id, TurnRow.index == first_turn - 1
            )
            before = session.scalar(previous) or 0  # NULL: stored before revision 0010, segment 0
        return {**episode_dict(row, turns=False), "turns": turns, "segment_before": before}

    return read(store, f"loading episode {episode_id} of run {run_id}", query)


def group_stubs(store: Store, episode: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The episodes of the episode's task group at its step and split (itself included), each with its
    turn stubs: what its anchor groups are made of (`views.anchor_groups`)."""
    where = [
        *_of_step(str(episode["run_id"]), int(episode["step"]), str(episode["split"])),
        EpisodeRow.group_id == episode["group_id"],
    ]

    def query(session: Session) -> list[dict[str, Any]]:
        return _with_stubs(session, list(session.scalars(select(EpisodeRow).where(*where))))

    return read(store, f"loading the task group of episode {episode['id']}", query)


# --- search ------------------------------------------------------------------------------------------


def episodes_by_task(
    store: Store, run_id: str, task: str, window: Window
) -> tuple[list[dict[str, Any]], int]:
    """One page of the run's episodes whose task id is `task` or starts with it (no turns), sorted by a
    key of EPISODE_SORTS (default: id); and how many there are."""
    order = _order(_episode_sorts(), window, "id")
    where = [EpisodeRow.run_id == run_id, EpisodeRow.task_id.startswith(task, autoescape=True)]

    def query(session: Session) -> tuple[list[dict[str, Any]], int]:
        rows = session.scalars(
            _paged(select(EpisodeRow).where(*where).order_by(*order, EpisodeRow.id), window)
        )
        total = session.scalar(select(func.count()).select_from(EpisodeRow).where(*where))
        return [episode_dict(row, turns=False) for row in rows], int(total or 0)

    return read(store, f"searching run {run_id} for task {task!r}", query)


def turns_with_text(
    store: Store, run_id: str, text: str, window: Window
) -> tuple[list[dict[str, Any]], bool]:
    """One page of the run's turns whose assistant text or observation contains `text`, in the order they
    were recorded, each {"episode": the episode (no turns), "turn": the turn}; and whether more follow."""
    statement = (
        select(EpisodeRow, TurnRow)
        .join(TurnRow, TurnRow.episode_id == EpisodeRow.id)
        .where(
            EpisodeRow.run_id == run_id,
            or_(
                TurnRow.text.contains(text, autoescape=True),
                TurnRow.observation.contains(text, autoescape=True),
            ),
        )
        .order_by(TurnRow.id)
        .offset(window.offset)
        .limit(window.limit + 1)
    )

    def query(session: Session) -> tuple[list[dict[str, Any]], bool]:
        rows = list(session.execute(statement))
        hits = [{"episode": episode_dict(e, turns=False), "turn": turn_dict(t)} for e, t in rows]
        return hits[: window.limit], len(hits) > window.limit

    return read(store, f"searching the turns of run {run_id}", query)


# --- export ------------------------------------------------------------------------------------------


def iter_episodes(store: Store, run_id: str, batch: int = 500) -> Iterator[dict[str, Any]]:
    """The run's episodes with all their turns, in id order (as `repository.load_episodes`), read
    `batch` episodes at a time so a large run is never held whole."""
    after = 0
    while True:
        rows = _episode_batch(store, run_id, after, batch)
        yield from rows
        if len(rows) < batch:
            return
        after = int(rows[-1]["id"])


def _episode_batch(store: Store, run_id: str, after: int, batch: int) -> list[dict[str, Any]]:
    def query(session: Session) -> list[dict[str, Any]]:
        statement = (
            select(EpisodeRow)
            .where(EpisodeRow.run_id == run_id, EpisodeRow.id > after)
            .order_by(EpisodeRow.id)
            .limit(batch)
        )
        rows = list(session.scalars(statement))
        turns: dict[int, list[dict[str, Any]]] = {row.id: [] for row in rows}
        turn_rows = session.scalars(
            select(TurnRow)
            .where(TurnRow.episode_id.in_(list(turns)))
            .order_by(TurnRow.episode_id, TurnRow.index)
        )
        for turn in turn_rows:
            turns[turn.episode_id].append(turn_dict(turn))
        return [{**episode_dict(row, turns=False), "turns": turns[row.id]} for row in rows]

    return read(store, f"exporting the episodes of run {run_id} after id {after}", query)
