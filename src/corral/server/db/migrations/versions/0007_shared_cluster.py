"""safe on a shared cluster: node credentials, jobs' Unix accounts, task usage and log caps

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("credential_hash", sa.String(length=64), nullable=True))
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(length=128), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(length=128), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("log_dropped", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("peak_memory", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("reason")
        batch.drop_column("cpu_seconds")
        batch.drop_column("peak_memory")
        batch.drop_column("log_dropped")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("unix_user")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("unix_user")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("credential_hash")
