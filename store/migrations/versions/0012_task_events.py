"""task_event: the append-only history of every change of a task; task.spec_version and
task_execution.spec_version: the spec version a task is at and a run ran under

Revision ID: 0012
Revises: 0011
"""

from alembic import op
import sqlalchemy as sa

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'task_event',
        sa.Column('id', sa.String(length=200), primary_key=True),
        sa.Column('task_id', sa.String(length=64), nullable=False),
        sa.Column('tenant_id', sa.String(length=128), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('actor', sa.String(length=200), nullable=False),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('spec_version', sa.Integer(), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=True),
        sa.Column('detail', sa.JSON(), nullable=True),
    )
    op.create_index('ix_task_event_tenant_id', 'task_event', ['tenant_id'])
    op.create_index('ix_task_event_task_at', 'task_event', ['task_id', 'at', 'id'])
    op.add_column('task', sa.Column('spec_version', sa.Integer(), nullable=False,
                                    server_default='1'))
    op.add_column('task_execution', sa.Column('spec_version', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('task_execution', schema=None) as batch_op:
        batch_op.drop_column('spec_version')
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_column('spec_version')
    op.drop_index('ix_task_event_task_at', table_name='task_event')
    op.drop_index('ix_task_event_tenant_id', table_name='task_event')
    op.drop_table('task_event')
