#!/bin/sh
# One-shot (temporalio/admin-tools image): create Temporal's two PostgreSQL databases and bring
# their schemas to the version this server expects. Safe to re-run: `create` ignores an existing
# database, `setup-schema -v 0.0` skips a database that is already versioned, and
# `update-schema` applies only the versions it has not applied yet.
# The password comes from SQL_PASSWORD, which temporal-sql-tool reads from the environment.
set -eu

: "${POSTGRES_SEEDS:?POSTGRES_SEEDS (database host) is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
DB_PORT="${DB_PORT:-5432}"
SCHEMA_ROOT="${TEMPORAL_SCHEMA_ROOT:-/etc/temporal/schema/postgresql/v12}"

sql_tool() {
    temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" "$@"
}

for pair in "${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"; do
    database="${pair%%:*}"
    schema="${pair#*:}"
    echo "temporal schema: ${database} (${schema})"
    sql_tool --db "$database" create
    sql_tool --db "$database" setup-schema -v 0.0
    sql_tool --db "$database" update-schema -d "${SCHEMA_ROOT}/${schema}/versioned"
done
echo "temporal schema: done"
