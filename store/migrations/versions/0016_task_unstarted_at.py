"""task.unstarted_at: the instant of the task's oldest run neither started nor decided, as its
workflow writes it (the overdue check reads it beside next_run_at)

Revision ID: 0016
Revises: 0015
"""

from alembic import op
import sqlalchemy as sa

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('unstarted_at', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_task_unstarted_at', 'task', ['unstarted_at'])


def downgrade() -> None:
    op.drop_index('ix_task_unstarted_at', table_name='task')
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_column('unstarted_at')
