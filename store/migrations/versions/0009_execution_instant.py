"""task_execution.instant: the instant a run aimed at (scheduled_at plus its jitter), which its
lateness and drift count from

Revision ID: 0009
Revises: 0008
"""

from alembic import op
import sqlalchemy as sa

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task_execution', sa.Column('instant', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('task_execution', schema=None) as batch_op:
        batch_op.drop_column('instant')
