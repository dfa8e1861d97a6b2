"""the scheduler leader's lease (high availability)

Revision ID: 0006
Revises: 0001
Create Date: 2026-11-30 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leases = op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("address", sa.String(length=253), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("wakes", sa.BigInteger(), nullable=False),
        sa.Column("changes", sa.BigInteger(), nullable=False),
        sa.Column("changed_nodes", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    # The row exists from the start, so replicas only ever update it (no insert race).
    op.bulk_insert(
        leases,
        [
            {
                "name": "scheduler",
                "epoch": 0,
                "acquired_at": 0.0,
                "expires_at": 0.0,
                "wakes": 0,
                "changes": 0,
            }
        ],
    )


def downgrade() -> None:
    op.drop_table("leases")
