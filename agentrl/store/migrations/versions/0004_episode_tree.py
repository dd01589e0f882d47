"""Tree rollouts: an episode's parent (the uid of the episode it branched from) and its branch turn.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.add_column(sa.Column("parent_uid", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("branch_turn", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("branch_turn")
        batch.drop_column("parent_uid")
