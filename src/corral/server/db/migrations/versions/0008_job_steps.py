"""job steps: processes a running job starts on its own nodes, and their logs

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-14 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("workdir", sa.String(length=4096), nullable=True),
        sa.Column("tasks_per_node", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("cancelled_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "attempt", "step", name="uq_steps_number"),
    )
    op.create_table(
        "step_tasks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("local_rank", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("log_size", sa.BigInteger(), nullable=False),
        sa.Column("log_dropped", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "attempt", "step", "rank", name="uq_step_tasks_rank"),
    )
    with op.batch_alter_table("step_tasks") as batch:
        batch.create_index("ix_step_tasks_node_state", ["node", "state"], unique=False)
    with op.batch_alter_table("log_chunks") as batch:
        batch.add_column(sa.Column("step", sa.Integer(), server_default="0", nullable=False))
        batch.drop_index("ix_log_chunks_task")
        batch.create_index(
            "ix_log_chunks_task", ["job_id", "attempt", "step", "rank", "offset"], unique=False
        )


def downgrade() -> None:
    op.execute("DELETE FROM log_chunks WHERE step != 0")
    with op.batch_alter_table("log_chunks") as batch:
        batch.drop_index("ix_log_chunks_task")
        batch.create_index(
            "ix_log_chunks_task", ["job_id", "attempt", "rank", "offset"], unique=False
        )
        batch.drop_column("step")
    op.drop_table("step_tasks")
    op.drop_table("steps")
