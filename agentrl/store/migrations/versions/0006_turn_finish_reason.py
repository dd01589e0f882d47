"""Each turn's finish reason: why the engine ended its completion ("stop" or "length"), NULL for turns
stored before it was kept (the viewer then infers it from the token count and text).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("finish_reason", sa.String(10), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35), as 0005 does: batch mode would copy the turns table
    op.drop_column("turns", "finish_reason")
