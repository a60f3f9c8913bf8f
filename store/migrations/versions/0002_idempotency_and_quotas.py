"""idempotency and quotas

Revision ID: 0002
Revises: 0001
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('idempotency_record',
    sa.Column('tenant_id', sa.String(length=128), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('request_hash', sa.String(length=64), nullable=False),
    sa.Column('task_id', sa.String(length=64), nullable=False),
    sa.Column('completed', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id', 'key')
    )
    op.create_table('tenant_quota',
    sa.Column('tenant_id', sa.String(length=128), nullable=False),
    sa.Column('max_active_tasks', sa.Integer(), nullable=True),
    sa.Column('min_interval_seconds', sa.Float(), nullable=True),
    sa.Column('allow_seconds_cron', sa.Boolean(), nullable=True),
    sa.Column('max_body_bytes', sa.Integer(), nullable=True),
    sa.Column('max_header_bytes', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id')
    )


def downgrade() -> None:
    op.drop_table('tenant_quota')
    op.drop_table('idempotency_record')
