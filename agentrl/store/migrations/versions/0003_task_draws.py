"""Task draws: one row per group a training step played, with why it was drawn and the task's posterior.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_draws",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=200), nullable=False),
        sa.Column("group_id", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.String(length=20), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("success_rate", sa.Double(), nullable=True),
        sa.Column("alpha", sa.Double(), nullable=True),
        sa.Column("beta", sa.Double(), nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_draws_run_step", "task_draws", ["run_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_task_draws_run_step", table_name="task_draws")
    op.drop_table("task_draws")
