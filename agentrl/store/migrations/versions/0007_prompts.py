"""First-prompt inputs: each distinct set of the env's tools and few-shot examples once (`prompts`, keyed by
the SHA-256 of its canonical JSON), and each episode's `prompt_id` (NULL for episodes stored before, and for
harness episodes). The reference is not a foreign key: SQLite cannot add one to an existing table in place.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("sha256"),
    )
    op.add_column("episodes", sa.Column("prompt_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35), as 0005 does: batch mode would copy the episodes table
    op.drop_column("episodes", "prompt_id")
    op.drop_table("prompts")
