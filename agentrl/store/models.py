"""The run store's tables as SQLAlchemy 2.0 typed declarative models.

What this is: six tables — runs, episodes, turns, metrics, task_draws, prompts — and nothing else. Token
ids are not stored (only counts); the store is for inspecting runs, not for replaying training batches.
What a turn sampled is kept for reading it token by token (revision 0008): each completion token's text
decoded on its own (`token_pieces`) and the sampler's log-prob of each (`token_logprobs`, packed float32;
`repository.pack_logprobs`), and (revision 0009) the trainer's log-prob of each under the weights the
step's update started from (`trainer_logprobs`, packed alike; NULL where the update computed none); all
are deferred, so only the readers that ask for them load them. Revision 0010 keeps each turn's token
segment and, under a context policy other than `full`, a view of what its prompt held (`Turn.prompt_view`);
revision 0011 each run's pid and host, by which a run whose process died is marked "killed".
`task_draws` holds one row per group a training step played: which task, why it was drawn or dropped, and
(adaptive sampler) the task's Beta posterior at the draw; the adaptive sampler's posterior is rebuilt from
these rows on resume. A tree rollout's branch (`Episode.parent_id` / `branch_turn`) keeps its parent's uid
and the turn it branched at, so a group can be drawn as its tree. Each turn keeps the engine's finish reason
("stop" or "length"; NULL in rows stored before revision 0006). `prompts` holds each distinct set of
first-prompt inputs (the env's tools and few-shot examples) once; an episode points at its set by
`prompt_id` (revision 0007; NULL before, and for harness episodes). `EpisodeRow.invalid_turns` repeats
the count of its invalid turns so that the viewer's per-step table reads episodes (through one covering
index) and never the turns.

What this is not: an API. These ORM classes never leave `agentrl/store/`; everything outside talks to
`repository.py`, which returns plain dicts. Schema changes go through Alembic revisions in
`agentrl/store/migrations/` (`open_store` upgrades a database to the newest one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utc_now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the process that created or resumed the run (revision 0011; NULL before): a "running" run whose
    # process is gone from its host is marked "killed" when runs are listed there (`mark_dead_runs`)
    pid: Mapped[int | None]
    host: Mapped[str | None] = mapped_column(String(255))


class EpisodeRow(Base):
    __tablename__ = "episodes"
    __table_args__ = (
        Index("ix_episodes_run_step", "run_id", "step"),
        # the run page's per-step table, read from the index alone (no episode text is touched)
        Index(
            "ix_episodes_run_step_summary",
            "run_id",
            "step",
            "split",
            "stop_reason",
            "success",
            "reward",
            "invalid_turns",
        ),
        Index("ix_episodes_run_task", "run_id", "task_id"),  # search by task id
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(64))  # the runner's Episode.episode_id
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int]
    split: Mapped[str] = mapped_column(String(10))
    env_id: Mapped[str] = mapped_column(String(200))
    task_id: Mapped[str] = mapped_column(String(200))
    group_id: Mapped[str] = mapped_column(String(200))
    seed: Mapped[int]
    reward: Mapped[float]
    success: Mapped[bool]
    stop_reason: Mapped[str] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(Text)
    num_turns: Mapped[int]
    invalid_turns: Mapped[int] = mapped_column(default=0, server_default="0")  # turns marked invalid
    initial_state_key: Mapped[str | None] = mapped_column(Text)  # the state turn 0 was taken in
    first_observation: Mapped[str | None] = mapped_column(Text)  # what the env showed at reset
    attempts: Mapped[int] = mapped_column(default=1, server_default="1")  # plays, re-runs included
    parent_uid: Mapped[str | None] = mapped_column(String(64))  # a tree branch's parent (its uid)
    prompt_id: Mapped[int | None]  # prompts.id: the first prompt's tools and examples (not enforced)
    branch_turn: Mapped[int | None]  # a tree branch's first own turn; the turns before are its parent's
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)

    turns: Mapped[list[TurnRow]] = relationship(order_by="TurnRow.index", cascade="all, delete-orphan")


class TurnRow(Base):
    __tablename__ = "turns"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), index=True)
    index: Mapped[int]
    text: Mapped[str] = mapped_column(Text)
    observation: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    reward: Mapped[float]
    advantage: Mapped[float | None]
    state_key: Mapped[str | None] = mapped_column(Text)
    invalid: Mapped[bool]
    tool_name: Mapped[str | None] = mapped_column(String(200))
    info: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the env's step info (e.g. exec results)
    finish_reason: Mapped[str | None] = mapped_column(String(10))  # the engine's: "stop" or "length"
    # the token segment the turn's prompt continues (NULL: stored before revision 0010, read as 0) and what
    # its prompt held under a context policy other than `full` (NULL otherwise; docs/context.md)
    segment: Mapped[int | None]
    prompt_view: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # each completion token's text, decoded alone (NULL: not recorded, e.g. stored before revision 0008)
    token_pieces: Mapped[list[str] | None] = mapped_column(JSON, deferred=True)
    # the sampler's log-prob of each completion token, little-endian float32 (NULL: not recorded)
    token_logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    # the trainer's, under the weights its step's update started from, encoded alike (NULL: not computed)
    trainer_logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)


class MetricRow(Base):
    __tablename__ = "metrics"
    __table_args__ = (
        Index("ix_metrics_run_step", "run_id", "step"),
        Index("ix_metrics_run_name", "run_id", "name", "step"),  # one metric of a run (runs list: best)
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int]
    name: Mapped[str] = mapped_column(String(200))
    value: Mapped[float | None]  # NULL when the metric was NaN or infinite


class PromptRow(Base):
    __tablename__ = "prompts"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)  # of `inputs` as canonical JSON
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"tools": [...], "examples": [...]}


class TaskDrawRow(Base):
    __tablename__ = "task_draws"
    __table_args__ = (Index("ix_task_draws_run_step", "run_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int]
    round: Mapped[int]  # 0: the step's first draw; 1, 2, ...: the filtered sampler's extra rounds
    task_id: Mapped[str] = mapped_column(String(200))
    group_id: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(String(20))  # agentrl.trainer.task_sampling.REASONS
    successes: Mapped[int]  # of the group's usable episodes (infrastructure failures not counted)
    failures: Mapped[int]
    success_rate: Mapped[float | None]  # NULL when every episode of the group failed for infra reasons
    alpha: Mapped[float | None]  # the adaptive sampler's posterior at the draw (NULL for other samplers)
    beta: Mapped[float | None]
    score: Mapped[float | None]  # the adaptive sampler's selection score p(1-p) (NULL when not scored)
