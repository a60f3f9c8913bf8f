"""tenant_quota: the workflow types and task queues a tenant's workflow jobs may start

Revision ID: 0007
Revises: 0006
"""

from alembic import op
import sqlalchemy as sa

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('tenant_quota', sa.Column('workflow_types', sa.JSON(), nullable=True))
    op.add_column('tenant_quota', sa.Column('workflow_task_queues', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tenant_quota') as batch:
        batch.drop_column('workflow_task_queues')
        batch.drop_column('workflow_types')
