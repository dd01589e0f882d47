"""Each turn's sampled tokens: `token_pieces`, the text of each completion token decoded on its own (a JSON
list of strings), and `token_logprobs`, the sampler's log-probability of each (a blob of little-endian
float32, 4 bytes a token). NULL where not recorded: turns stored before this revision, and pieces of turns
recorded without a tokenizer.

Why this layout: the log-probs as a packed float32 blob take a third of the space of JSON numbers and need
no parsing (one `array.frombytes`), and are exactly the sampler's float32 values; the pieces are strings,
which JSON keeps as they are. Both are appended to `turns` after every older column, so that SQLite reads
of the other columns (the step page's stubs, the text search) stop before them, and the ORM defers them:
only the episode page's one page of turns loads them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("token_pieces", sa.JSON(), nullable=True))
    op.add_column("turns", sa.Column("token_logprobs", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite >= 3.35), as 0005 does: batch mode would copy the turns table
    op.drop_column("turns", "token_logprobs")
    op.drop_column("turns", "token_pieces")
