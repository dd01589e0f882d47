"""Each turn's trainer log-probs: `trainer_logprobs`, the trainer's log-probability of each completion token
under the weights the training step's update started from, at the sampling temperature, encoded as
`token_logprobs` is (a blob of little-endian float32, 4 bytes a token), so that the viewer can show the
importance ratio exp(trainer - sampler) token by token. NULL where the update did not compute them:
evaluation episodes, episodes left out of the update, turns cut at the max context or copied from a tree
branch's parent, and turns stored before this revision.

Appended after every older column and deferred by the ORM, as 0008's columns are: only the episode page's
one page of turns loads it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("trainer_logprobs", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35), as 0005 does: batch mode would copy the turns table
    op.drop_column("turns", "trainer_logprobs")
