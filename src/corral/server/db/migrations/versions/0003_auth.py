"""authentication: server secrets, idempotency keys, audit log

Revision ID: 0003
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("manifest_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("user", "key"),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("target", sa.String(length=253), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.create_index("ix_audit_at", ["at"], unique=False)
        batch_op.create_index("ix_audit_user_at", ["user", "at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_user_at")
        batch_op.drop_index("ix_audit_at")
    op.drop_table("audit")
    op.drop_table("idempotency_keys")
    op.drop_table("server_secrets")
