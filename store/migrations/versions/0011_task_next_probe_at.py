"""task.next_probe_at: when an auto-paused task's probe run is due

Revision ID: 0011
Revises: 0010
"""

from alembic import op
import sqlalchemy as sa

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('task', sa.Column('next_probe_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('task', 'next_probe_at')
