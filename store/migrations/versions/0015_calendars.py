"""calendar: the tenants' calendars of excluded dates

Revision ID: 0015
Revises: 0014
"""

from alembic import op
import sqlalchemy as sa

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'calendar',
        sa.Column('id', sa.String(length=64), primary_key=True),
        sa.Column('tenant_id', sa.String(length=128), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('dates', sa.JSON(), nullable=False),
        sa.Column('holidays', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index('ix_calendar_tenant_created', 'calendar', ['tenant_id', 'created_at', 'id'])


def downgrade() -> None:
    op.drop_index('ix_calendar_tenant_created', table_name='calendar')
    op.drop_table('calendar')
