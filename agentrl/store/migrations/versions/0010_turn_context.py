"""Each turn's token segment and prompt view (`rollout.context`, docs/context.md): the segment its prompt
continues (NULL for turns stored before it was kept: segment 0) and, under a context policy other than
`full`, what its prompt held (the policy, the turns shown, those masked, the window's task turn and state
line, a summary's turn); NULL otherwise.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("segment", sa.Integer(), nullable=True))
    op.add_column("turns", sa.Column("prompt_view", sa.JSON(), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35), as 0005 does: batch mode would copy the turns table
    op.drop_column("turns", "prompt_view")
    op.drop_column("turns", "segment")
