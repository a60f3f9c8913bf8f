"""task.overdue_since and task.overdue_run_at: the alarm of a run that did not come (raised
and cleared by the API's overdue check), and an index on next_run_at that the check reads

Revision ID: 0013
Revises: 0012
"""

from alembic import op
import sqlalchemy as sa

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('overdue_since', sa.DateTime(timezone=True), nullable=True))
    op.add_column('task', sa.Column('overdue_run_at', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_task_next_run_at', 'task', ['next_run_at'])
    op.create_index('ix_task_overdue', 'task', ['overdue_since'])


def downgrade() -> None:
    op.drop_index('ix_task_overdue', table_name='task')
    op.drop_index('ix_task_next_run_at', table_name='task')
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_column('overdue_run_at')
        batch_op.drop_column('overdue_since')
