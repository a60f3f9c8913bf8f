"""idempotency_record.response: the first answer of an operation sent with an Idempotency-Key

Revision ID: 0008
Revises: 0007
"""

from alembic import op
import sqlalchemy as sa

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('idempotency_record', sa.Column('response', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('idempotency_record', schema=None) as batch_op:
        batch_op.drop_column('response')
