"""calendar.deleted_at: a deleted calendar is kept for the tasks that took it in the moment of
its delete (their workflows still read its dates)

Revision ID: 0017
Revises: 0016
"""

from alembic import op
import sqlalchemy as sa

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('calendar', sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('calendar', schema=None) as batch_op:
        batch_op.drop_column('deleted_at')
