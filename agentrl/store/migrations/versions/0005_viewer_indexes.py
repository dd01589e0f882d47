"""The viewer at scale: an episode's invalid-turn count, and the indexes the viewer's paged readers use.

`episodes.invalid_turns` (filled from the turns for stored episodes) lets the run page's per-step table read
episodes only; `ix_episodes_run_step_summary` covers that table's columns, `ix_episodes_run_task` serves
search by task id, `ix_metrics_run_name` one metric of a run (the runs list's best held-out success).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SUMMARY_COLUMNS = ["run_id", "step", "split", "stop_reason", "success", "reward", "invalid_turns"]


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("invalid_turns", sa.Integer(), server_default="0", nullable=False))
    op.execute(
        "UPDATE episodes SET invalid_turns = "
        "(SELECT count(*) FROM turns WHERE turns.episode_id = episodes.id AND turns.invalid)"
    )
    op.create_index("ix_episodes_run_step_summary", "episodes", SUMMARY_COLUMNS)
    op.create_index("ix_episodes_run_task", "episodes", ["run_id", "task_id"])
    op.create_index("ix_metrics_run_name", "metrics", ["run_id", "name", "step"])


def downgrade() -> None:
    op.drop_index("ix_metrics_run_name", table_name="metrics")
    op.drop_index("ix_episodes_run_task", table_name="episodes")
    op.drop_index("ix_episodes_run_step_summary", table_name="episodes")
    # a plain DROP COLUMN (SQLite >= 3.35): batch mode would copy and drop the episodes table, which the
    # turns' foreign key forbids while foreign keys are enforced
    op.drop_column("episodes", "invalid_turns")
