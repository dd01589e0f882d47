"""The initial schema: runs, episodes, turns, metrics (as in `agentrl/store/models.py` when Alembic landed).

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(10), nullable=False),
        sa.Column("env_id", sa.String(200), nullable=False),
        sa.Column("task_id", sa.String(200), nullable=False),
        sa.Column("group_id", sa.String(200), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("reward", sa.Double(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("stop_reason", sa.String(20), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("num_turns", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_episodes_run_step", "episodes", ["run_id", "step"])
    op.create_table(
        "turns",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("episode_id", sa.Integer(), sa.ForeignKey("episodes.id"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("observation", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("reward", sa.Double(), nullable=False),
        sa.Column("advantage", sa.Double(), nullable=True),
        sa.Column("state_key", sa.Text(), nullable=True),
        sa.Column("invalid", sa.Boolean(), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=True),
    )
    op.create_index("ix_turns_episode_id", "turns", ["episode_id"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
    )
    op.create_index("ix_metrics_run_step", "metrics", ["run_id", "step"])


def downgrade() -> None:
    for table in ("metrics", "turns", "episodes", "runs"):
        op.drop_table(table)
