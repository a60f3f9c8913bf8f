"""task.backfill: the progress of a task's latest backfill

Revision ID: 0014
Revises: 0013
"""

from alembic import op
import sqlalchemy as sa

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('backfill', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('task', 'backfill')
