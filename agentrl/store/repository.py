"""The run store's public functions: open it, write runs, episodes, metrics and task draws, read them back.

What this is: plain functions over a `Store` handle (an engine and a session factory). Each write is one
transaction. Readers return plain dicts; ORM objects never leave `agentrl/store/`. Database failures become
`StoreError` with a message saying what to check.

URL resolution: the `url` argument, else $AGENTRL_DB_URL, else `sqlite:///runs/agentrl.db`. SQLite files
get their parent folder created, WAL journaling (readers do not block the writer) and a busy timeout.

Schema: `open_store` brings the database to the newest Alembic revision (`agentrl/store/migrations/`), so a
fresh database is created by `upgrade head` and an older one is upgraded in place.

What this is not: asynchronous (see `writer.py` for the background writer), or paged: the readers here
return a whole run; the viewer's readers of one page at a time are in `pages.py`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sys
import uuid
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from alembic.util import CommandError as AlembicError
from sqlalchemy import Engine, create_engine, delete, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from agentrl.errors import StoreError
from agentrl.sandbox.channel import pid_exists
from agentrl.store.migrations import upgrade
from agentrl.store.models import EpisodeRow, MetricRow, PromptRow, Run, TaskDrawRow, TurnRow, utc_now
from agentrl.types import Episode, Turn

DB_URL_ENV = "AGENTRL_DB_URL"
DEFAULT_DB_URL = "sqlite:///runs/agentrl.db"
SQLITE_BUSY_TIMEOUT_MS = 10_000

Split = Literal["train", "eval"]
T = TypeVar("T")

TokenPieces = Callable[[Sequence[int]], list[str]]
"""Completion token ids -> the text of each token decoded on its own (`writer.tokenizer_pieces`)."""
TurnLogprobs = Sequence[Sequence[float] | None]
"""One episode's trainer log-probs: per turn, one per completion token, or None (not computed)."""


@dataclass(frozen=True)
class Store:
    """An open store: where it lives and how to get a session. Close with `close_store`."""

    url: str
    engine: Engine
    sessions: sessionmaker[Session]


def resolve_url(url: str | None) -> str:
    return url or os.environ.get(DB_URL_ENV) or DEFAULT_DB_URL


def open_store(url: str | None = None) -> Store:
    """Open (and create if needed) the store at `url` (see the module docstring for the fallbacks)."""
    resolved = resolve_url(url)
    try:
        engine = create_engine(resolved)
        if engine.dialect.name == "sqlite":
            _prepare_sqlite(engine)
        upgrade(engine)
    except (SQLAlchemyError, OSError, ValueError, AlembicError) as exc:
        raise StoreError(
            f"cannot open the run store at {resolved!r}: {exc}. Check the URL (store.url or ${DB_URL_ENV}) "
            "and that the database is reachable and writable."
        ) from exc
    return Store(resolved, engine, sessionmaker(engine, expire_on_commit=False))


def close_store(store: Store) -> None:
    store.engine.dispose()


def _prepare_sqlite(engine: Engine) -> None:
    database = engine.url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)

    @event.listens_for(engine, "connect")
    def _on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


@contextmanager
def _transaction(store: Store, doing: str) -> Iterator[Session]:
    """One session, committed on success; any database error becomes a StoreError naming what failed."""
    try:
        with store.sessions.begin() as session:
            yield session
    except SQLAlchemyError as exc:
        raise StoreError(f"run store ({_safe_url(store.url)}): {doing} failed: {exc}") from exc


def read(store: Store, doing: str, query: Callable[[Session], T]) -> T:
    """Run `query` in one session (a read-only use of a transaction); errors become a StoreError."""
    with _transaction(store, doing) as session:
        return query(session)


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


# --- writers -----------------------------------------------------------------------------------------


def create_run(store: Store, name: str, task: str, config: Mapping[str, Any]) -> str:
    """Insert a run with status "running"; return its id (uuid4 hex)."""
    run_id = uuid.uuid4().hex
    pid, host = this_process()
    with _transaction(store, f"creating run {name!r}") as session:
        session.add(
            Run(id=run_id, name=name, task=task, config=dict(config), status="running", pid=pid, host=host)
        )
    return run_id


def this_process() -> tuple[int, str]:
    """(pid, host name) of this process: what a run records of the process that runs it."""
    return os.getpid(), socket.gethostname()


def mark_dead_runs(store: Store, alive: Callable[[int], bool] = pid_exists) -> list[str]:
    """Mark "killed" every run still "running" whose process, on this host, is gone (killed by a signal or
    the OOM killer before it could finish its row); the ids so marked. Runs of other hosts, and runs stored
    before their pid was kept, are left as they are (nothing here can tell)."""
    host = socket.gethostname()
    with _transaction(store, "marking runs whose process died") as session:
        running = session.scalars(select(Run).where(Run.status == "running", Run.host == host))
        dead = [run for run in running if run.pid is not None and not alive(run.pid)]
        for run in dead:
            run.status, run.finished_at = "killed", utc_now()
        return [run.id for run in dead]


def resume_run(store: Store, run_id: str, after_step: int) -> None:
    """Mark the run "running" again and delete what it recorded after `after_step` (its episodes, turns,
    metrics and task draws of later steps, written before the process died), so a resumed run records each
    step once."""
    with _transaction(store, f"resuming run {run_id} after step {after_step}") as session:
        run = session.get(Run, run_id)
        if run is None:
            raise StoreError(f"no run {run_id!r} in the store; resume with the store the run was recorded in")
        later = select(EpisodeRow.id).where(EpisodeRow.run_id == run_id, EpisodeRow.step > after_step)
        session.execute(delete(TurnRow).where(TurnRow.episode_id.in_(later)))
        session.execute(delete(EpisodeRow).where(EpisodeRow.run_id == run_id, EpisodeRow.step > after_step))
        session.execute(delete(MetricRow).where(MetricRow.run_id == run_id, MetricRow.step > after_step))
        session.execute(
            delete(TaskDrawRow).where(TaskDrawRow.run_id == run_id, TaskDrawRow.step > after_step)
        )
        run.status, run.finished_at = "running", None
        run.pid, run.host = this_process()


def finish_run(store: Store, run_id: str, status: str) -> None:
    """Set the run's final status ("finished", "failed", ...) and its finish time."""
    with _transaction(store, f"finishing run {run_id}") as session:
        run = session.get(Run, run_id)
        if run is None:
            raise StoreError(f"no run {run_id!r} in the store; was it created in a different database?")
        run.status = status
        run.finished_at = utc_now()


def record_episodes(
    store: Store,
    run_id: str,
    step: int,
    split: Split,
    episodes: Sequence[Episode],
    advantages: Sequence[Sequence[float]] | None = None,
    token_pieces: TokenPieces | None = None,
    trainer_logprobs: Sequence[TurnLogprobs] | None = None,
) -> None:
    """Store episodes and their turns in one transaction; `advantages[i][t]` (if given) goes on turn t.
    Each turn keeps its sampler log-probs, with `token_pieces` the text of each completion token, and with
    `trainer_logprobs[i][t]` (a list, one per completion token, or None) the trainer's log-probs."""
    for name, given in (("advantage", advantages), ("trainer log-prob", trainer_logprobs)):
        if given is not None and len(given) != len(episodes):
            raise StoreError(
                f"got {len(given)} {name} lists for {len(episodes)} episodes; pass one per episode"
            )
    with _transaction(store, f"recording {len(episodes)} episodes of run {run_id}") as session:
        prompts = _prompt_ids(session, episodes)
        for index, episode in enumerate(episodes):
            own = None if advantages is None else advantages[index]
            trainer = None if trainer_logprobs is None else trainer_logprobs[index]
            row = _episode_row(run_id, step, split, episode, own, token_pieces, trainer)
            row.prompt_id = prompts[index]
            session.add(row)


def _prompt_ids(session: Session, episodes: Sequence[Episode]) -> list[int | None]:
    """Each episode's `prompts.id` (None without prompt inputs), storing each new set of inputs once, keyed
    by the SHA-256 of its canonical JSON."""
    known: dict[str, int] = {}
    ids: list[int | None] = []
    for episode in episodes:
        if episode.prompt_inputs is None:
            ids.append(None)
            continue
        text = json.dumps(episode.prompt_inputs, sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest not in known:
            found = session.scalar(select(PromptRow.id).where(PromptRow.sha256 == digest))
            if found is None:
                row = PromptRow(sha256=digest, inputs=json.loads(text))
                session.add(row)
                session.flush()
                found = row.id
            known[digest] = found
        ids.append(known[digest])
    return ids


def _episode_row(
    run_id: str,
    step: int,
    split: str,
    episode: Episode,
    advantages: Sequence[float] | None,
    token_pieces: TokenPieces | None = None,
    trainer_logprobs: TurnLogprobs | None = None,
) -> EpisodeRow:
    for name, given in (("advantages", advantages), ("trainer log-prob lists", trainer_logprobs)):
        if given is not None and len(given) != len(episode.turns):
            turns = len(episode.turns)
            raise StoreError(f"episode {episode.episode_id}: {len(given)} {name} for {turns} turns")
    return EpisodeRow(
        uid=episode.episode_id,
        run_id=run_id,
        step=step,
        split=split,
        env_id=episode.env_id,
        task_id=episode.task_id,
        group_id=episode.group_id,
        seed=episode.seed,
        reward=episode.reward,
        success=episode.success,
        stop_reason=episode.stop_reason,
        error=episode.error,
        num_turns=len(episode.turns),
        invalid_turns=sum(1 for turn in episode.turns if turn.invalid),
        initial_state_key=episode.initial_state_key,
        first_observation=episode.first_observation,
        attempts=episode.attempts,
        parent_uid=episode.parent_id,
        branch_turn=episode.branch_turn,
        turns=[
            _turn_row(
                turn,
                None if advantages is None else float(advantages[t]),
                token_pieces,
                None if trainer_logprobs is None else trainer_logprobs[t],
            )
            for t, turn in enumerate(episode.turns)
        ],
    )


def _turn_row(
    turn: Turn,
    advantage: float | None,
    token_pieces: TokenPieces | None = None,
    trainer_logprobs: Sequence[float] | None = None,
) -> TurnRow:
    calls = turn.action.tool_calls
    ids = turn.completion_ids
    if trainer_logprobs is not None and len(trainer_logprobs) != len(ids):
        raise StoreError(
            f"turn {turn.index}: {len(trainer_logprobs)} trainer log-probs for {len(ids)} completion tokens"
        )
    return TurnRow(
        index=turn.index,
        text=turn.text,
        observation=turn.observation,
        prompt_tokens=len(turn.prompt_ids),
        completion_tokens=len(turn.completion_ids),
        reward=turn.reward,
        advantage=advantage,
        state_key=turn.state_key,
        invalid=turn.invalid,
        tool_name=calls[0].name if calls else None,
        info=json_info(turn.info),
        finish_reason=turn.finish_reason,
        segment=turn.segment,
        prompt_view=dict(turn.prompt_view) if turn.prompt_view is not None else None,
        token_pieces=token_pieces(ids) if token_pieces is not None and ids else None,
        token_logprobs=pack_logprobs(turn.completion_logprobs) if turn.completion_logprobs else None,
        trainer_logprobs=pack_logprobs(trainer_logprobs) if trainer_logprobs else None,
    )


def pack_logprobs(logprobs: Sequence[float]) -> bytes:
    """Log-probs as the store keeps them: little-endian float32, 4 bytes each (`unpack_logprobs`)."""
    packed = array("f", logprobs)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_logprobs(blob: bytes) -> list[float]:
    """The log-probs of `pack_logprobs(values)`, as float32 rounds them."""
    unpacked = array("f")
    unpacked.frombytes(blob)
    if sys.byteorder == "big":
        unpacked.byteswap()
    return unpacked.tolist()


def turn_tokens(row: TurnRow) -> dict[str, Any]:
    """A turn's sampled tokens: {"pieces": [str] or None, "logprobs": [float] or None, "trainer": [float]
    or None}, the sampler's log-probs and the trainer's; None where the store has none (a reader must have
    loaded the deferred columns, `pages.load_episode` does)."""
    sampler, trainer = row.token_logprobs, row.trainer_logprobs
    return {
        "pieces": row.token_pieces,
        "logprobs": None if sampler is None else unpack_logprobs(sampler),
        "trainer": None if trainer is None else unpack_logprobs(trainer),
    }


INFO_VALUE_LIMIT = 2000  # characters of one info value kept in the store


def json_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The env's step info as JSON-safe values (others as text), each at most INFO_VALUE_LIMIT chars."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if not isinstance(value, (bool, int, float, type(None))):
            value = value if isinstance(value, str) else json.dumps(value, default=str)
            value = value if len(value) <= INFO_VALUE_LIMIT else value[:INFO_VALUE_LIMIT] + "…"
        out[str(key)] = value
    return out


def record_metrics(store: Store, run_id: str, step: int, metrics: Mapping[str, float]) -> None:
    """Store one row per metric; a non-finite value (NaN, inf) is stored as NULL."""
    rows = [
        MetricRow(run_id=run_id, step=step, name=name, value=float(value) if math.isfinite(value) else None)
        for name, value in metrics.items()
    ]
    with _transaction(store, f"recording metrics of run {run_id} step {step}") as session:
        session.add_all(rows)


TASK_DRAW_FIELDS = (
    "step",
    "round",
    "task_id",
    "group_id",
    "reason",
    "successes",
    "failures",
    "success_rate",
    "alpha",
    "beta",
    "score",
)
"""The keys of one task draw, as `record_task_draws` takes them and `load_task_draws` returns them."""


def record_task_draws(store: Store, run_id: str, draws: Sequence[Mapping[str, Any]]) -> None:
    """Store one row per played group of a training step (the keys of `TASK_DRAW_FIELDS`), one transaction."""
    for draw in draws:
        missing = sorted(set(TASK_DRAW_FIELDS) - set(draw))
        if missing:
            raise StoreError(f"a task draw lacks {missing}; pass every key of TASK_DRAW_FIELDS")
    rows = [TaskDrawRow(run_id=run_id, **{key: draw[key] for key in TASK_DRAW_FIELDS}) for draw in draws]
    with _transaction(store, f"recording {len(rows)} task draws of run {run_id}") as session:
        session.add_all(rows)


# --- readers -----------------------------------------------------------------------------------------


def list_runs(store: Store) -> list[dict[str, Any]]:
    """Every run, newest first, as plain dicts."""

    def query(session: Session) -> list[dict[str, Any]]:
        runs = session.scalars(select(Run).order_by(Run.created_at.desc()))
        return [run_dict(run) for run in runs]

    return read(store, "listing runs", query)


def load_episodes(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's episodes in insertion order, each a dict with a "turns" list of dicts."""

    def query(session: Session) -> list[dict[str, Any]]:
        statement = (
            select(EpisodeRow)
            .where(EpisodeRow.run_id == run_id)
            .order_by(EpisodeRow.id)
            .options(selectinload(EpisodeRow.turns))
        )
        return [episode_dict(row) for row in session.scalars(statement)]

    return read(store, f"loading episodes of run {run_id}", query)


def load_metrics(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's metric rows as {"step", "name", "value"} dicts, by step then insertion order."""

    def query(session: Session) -> list[dict[str, Any]]:
        columns = (MetricRow.step, MetricRow.name, MetricRow.value)  # rows, not ORM objects: ~10x faster
        statement = select(*columns).where(MetricRow.run_id == run_id).order_by(MetricRow.step, MetricRow.id)
        return [
            {"step": step, "name": name, "value": value} for step, name, value in session.execute(statement)
        ]

    return read(store, f"loading metrics of run {run_id}", query)


def load_task_draws(store: Store, run_id: str, up_to_step: int | None = None) -> list[dict[str, Any]]:
    """The run's task draws (dicts with the keys of `TASK_DRAW_FIELDS`), in the order they were recorded;
    only those of steps <= `up_to_step` when given."""

    def query(session: Session) -> list[dict[str, Any]]:
        statement = select(TaskDrawRow).where(TaskDrawRow.run_id == run_id)
        if up_to_step is not None:
            statement = statement.where(TaskDrawRow.step <= up_to_step)
        rows = session.scalars(statement.order_by(TaskDrawRow.step, TaskDrawRow.id))
        return [{key: getattr(row, key) for key in TASK_DRAW_FIELDS} for row in rows]

    return read(store, f"loading task draws of run {run_id}", query)


def count_rows(store: Store) -> dict[str, int]:
    """Row counts of the runs, episodes, turns and metrics tables: {"runs": ..., "episodes": ..., ...}."""
    tables = {"runs": Run, "episodes": EpisodeRow, "turns": TurnRow, "metrics": MetricRow}

    def query(session: Session) -> dict[str, int]:
        return {
            name: int(session.scalar(select(func.count()).select_from(model)) or 0)
            for name, model in tables.items()
        }

    return read(store, "counting rows", query)


def run_dict(run: Run) -> dict[str, Any]:
    """The run as a plain dict (its columns)."""
    columns = ("id", "name", "task", "config", "status", "created_at", "finished_at")
    return {column: getattr(run, column) for column in columns}


def episode_dict(row: EpisodeRow, turns: bool = True) -> dict[str, Any]:
    """The episode as a plain dict, with a "turns" list of `turn_dict`s unless `turns` is False."""
    columns = (
        "id",
        "uid",
        "run_id",
        "step",
        "split",
        "env_id",
        "task_id",
        "group_id",
        "seed",
        "reward",
        "success",
        "stop_reason",
        "error",
        "num_turns",
        "invalid_turns",
        "initial_state_key",
        "first_observation",
        "attempts",
        "parent_uid",
        "branch_turn",
        "prompt_id",
        "created_at",
    )
    out = {column: getattr(row, column) for column in columns}
    return {**out, "turns": [turn_dict(t) for t in row.turns]} if turns else out


def turn_dict(row: TurnRow) -> dict[str, Any]:
    """The turn as a plain dict (its columns but the episode id)."""
    columns = (
        "index",
        "text",
        "observation",
        "prompt_tokens",
        "completion_tokens",
        "reward",
        "advantage",
        "state_key",
        "invalid",
        "tool_name",
        "info",
        "finish_reason",
        "prompt_view",
    )
    return {**{column: getattr(row, column) for column in columns}, "segment": row.segment or 0}


OUTCOME_FIELDS = (
    "id",
    "uid",
    "step",
    "split",
    "task_id",
    "group_id",
    "reward",
    "success",
    "stop_reason",
    "error",
)
"""The episode columns of `load_split_episodes`: what a held-out comparison needs, no text and no turns."""


def load_split_episodes(store: Store, run_id: str, split: Split) -> list[dict[str, Any]]:
    """The run's episodes of one split (e.g. its held-out evaluations) as dicts of `OUTCOME_FIELDS`, by id;
    one query over the episodes table only."""

    def query(session: Session) -> list[dict[str, Any]]:
        columns = [getattr(EpisodeRow, name) for name in OUTCOME_FIELDS]
        statement = (
            select(*columns)
            .where(EpisodeRow.run_id == run_id, EpisodeRow.split == split)
            .order_by(EpisodeRow.id)
        )
        return [dict(zip(OUTCOME_FIELDS, row, strict=True)) for row in session.execute(statement)]

    return read(store, f"loading the {split} episodes of run {run_id}", query)


def load_prompt(store: Store, prompt_id: int) -> dict[str, Any] | None:
    """The first-prompt inputs stored under `prompt_id` ({"tools": [...], "examples": [...]}), or None."""

    def query(session: Session) -> dict[str, Any] | None:
        row = session.get(PromptRow, prompt_id)
        return None if row is None else dict(row.inputs)

    return read(store, f"loading prompt {prompt_id}", query)
