"""holds and job dependencies: jobs.held, jobs.dependency

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-20 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch.add_column(sa.Column("dependency", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dependency")
        batch.drop_column("held")
