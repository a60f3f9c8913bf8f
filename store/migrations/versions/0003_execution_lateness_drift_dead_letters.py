"""execution lateness drift dead letters

Revision ID: 0003
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('task_execution', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lateness_ms', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('drifted', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('dead_letter', sa.String(length=16), nullable=True))
        batch_op.create_index(batch_op.f('ix_task_execution_dead_letter'), ['dead_letter'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('task_execution', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_task_execution_dead_letter'))
        batch_op.drop_column('dead_letter')
        batch_op.drop_column('drifted')
        batch_op.drop_column('lateness_ms')

