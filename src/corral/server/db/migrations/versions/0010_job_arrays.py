"""job arrays: jobs.array_job_id, jobs.array_task_id, jobs.array_max

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-22 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_max", sa.Integer(), nullable=True))
        batch.create_unique_constraint("uq_jobs_array_task", ["array_job_id", "array_task_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_array_task", type_="unique")
        batch.drop_column("array_max")
        batch.drop_column("array_task_id")
        batch.drop_column("array_job_id")
