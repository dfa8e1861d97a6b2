"""node pools: pool_units, pool_failures, nodes.leave_at

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 08:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_units",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("pool", sa.String(63), nullable=False, index=True),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("idle_since", sa.Float(), nullable=True),
        sa.Column("deadline", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
    )
    op.create_table(
        "pool_failures",
        sa.Column("pool", sa.String(63), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("last", sa.Float(), nullable=False),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("leave_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("leave_at")
    op.drop_table("pool_failures")
    op.drop_table("pool_units")
