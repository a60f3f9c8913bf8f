"""signing_secret: the tenants' secrets that sign deliveries, encrypted at rest

Revision ID: 0010
Revises: 0009
"""

from alembic import op
import sqlalchemy as sa

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'signing_secret',
        sa.Column('id', sa.String(length=64), primary_key=True),
        sa.Column('tenant_id', sa.String(length=128), nullable=False),
        sa.Column('secret_encrypted', sa.String(length=512), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_signing_secret_tenant_id', 'signing_secret', ['tenant_id'])
    op.create_index('ux_signing_secret_current', 'signing_secret', ['tenant_id'], unique=True,
                    sqlite_where=sa.text('expires_at IS NULL'),
                    postgresql_where=sa.text('expires_at IS NULL'))


def downgrade() -> None:
    op.drop_index('ux_signing_secret_current', table_name='signing_secret')
    op.drop_index('ix_signing_secret_tenant_id', table_name='signing_secret')
    op.drop_table('signing_secret')
