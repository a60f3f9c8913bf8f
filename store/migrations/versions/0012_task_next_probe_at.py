"""task.next_probe_at: when an auto-paused task's probe run is due

Revision ID: 0012
Revises: 0010
"""

from alembic import op
import sqlalchemy as sa

revision = '0012'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('next_probe_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('task', 'next_probe_at')
