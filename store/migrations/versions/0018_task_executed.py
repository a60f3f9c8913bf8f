"""task.executed: the scheduled runs that ran, as the task's workflow counts them (max_runs
counts these; a backfill's run of an instant again turns its row's trigger)

Revision ID: 0018
Revises: 0017
"""

from alembic import op
import sqlalchemy as sa

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('executed', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_column('executed')
