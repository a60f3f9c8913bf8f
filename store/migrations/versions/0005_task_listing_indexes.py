"""task listing indexes ending in the page order (created_at, id): by tenant and name, and
across tenants (admin listing)

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_index('ix_task_name')
        batch_op.create_index('ix_task_tenant_name_created', ['tenant_id', 'name', 'created_at', 'id'],
                              unique=False)
        batch_op.create_index('ix_task_created', ['created_at', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('task', schema=None) as batch_op:
        batch_op.drop_index('ix_task_created')
        batch_op.drop_index('ix_task_tenant_name_created')
        batch_op.create_index('ix_task_name', ['name'], unique=False)
