"""telemetry: idle jobs, GPU time used by tasks, GPU error counters acted on per node

Revision ID: 0004
Revises: 0001
Create Date: 2026-11-30 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("idle_since", sa.Float(), nullable=True))
        batch.add_column(sa.Column("idle", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("gpu_seconds_used", sa.Float(), server_default="0", nullable=False)
        )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("gpu_errors", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("gpu_errors")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("gpu_seconds_used")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("idle")
        batch.drop_column("idle_since")
