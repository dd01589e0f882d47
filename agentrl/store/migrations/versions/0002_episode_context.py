"""Episode context for the viewer and credit: initial state key, first observation, attempts; turn info.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("initial_state_key", sa.Text(), nullable=True))
        batch.add_column(sa.Column("first_observation", sa.Text(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("info", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("info")
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("attempts")
        batch.drop_column("first_observation")
        batch.drop_column("initial_state_key")
