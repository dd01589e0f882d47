"""Each run's process: the pid and host of the process that created (or resumed) it, so that a run left
"running" by a process that died (killed by a signal, the machine's OOM killer) is marked "killed" the next
time runs are listed on that host (`repository.mark_dead_runs`). NULL for runs stored before.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("pid", sa.Integer(), nullable=True))
    op.add_column("runs", sa.Column("host", sa.String(255), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "host")
    op.drop_column("runs", "pid")
