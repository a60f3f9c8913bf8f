"""task.state_version as a 64-bit integer (it carries the workflow run's start time)

Revision ID: 0004
Revises: 0003
"""

from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.alter_column('state_version', existing_type=sa.Integer(), type_=sa.BigInteger(),
                              existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.alter_column('state_version', existing_type=sa.BigInteger(), type_=sa.Integer(),
                              existing_nullable=False)
