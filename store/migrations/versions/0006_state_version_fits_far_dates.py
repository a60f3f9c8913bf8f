"""task.state_version keeps the run's start in ms times 2**16 (was times 10**6, which overflows
64 bits for runs started after the year 2262, as a time-skipping server reaches)

A migrated row keeps its run's start and drops the run's own count, so the next write of the
same run, or of any later run, outranks it. A row written the old way after the migration (by
a worker of the release before) is replaced by any write (store/tasks.py LEGACY_STATE_VERSION).

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE task SET state_version = (state_version / 1000000) * 65536")


def downgrade() -> None:
    op.execute("UPDATE task SET state_version = (state_version / 65536) * 1000000")
