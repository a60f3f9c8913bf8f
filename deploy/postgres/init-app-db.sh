#!/bin/sh
# Runs once, when the postgres image initialises an empty data volume
# (/docker-entrypoint-initdb.d). The superuser (POSTGRES_USER) belongs to Temporal; the
# application gets its own login role and a database it owns, and nothing else.
# Works both executed and sourced by the image's entrypoint, hence no `set` and no `exit`.

: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SCHEDULER_DB_USER:?SCHEDULER_DB_USER is required}"
: "${SCHEDULER_DB_PASSWORD:?SCHEDULER_DB_PASSWORD is required}"
: "${SCHEDULER_DB_NAME:?SCHEDULER_DB_NAME is required}"

# psql variables (:"name" quotes an identifier, :'name' a literal), so odd characters in the
# names or the password cannot break out of the statements.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres \
    --set=app_user="$SCHEDULER_DB_USER" \
    --set=app_password="$SCHEDULER_DB_PASSWORD" \
    --set=app_db="$SCHEDULER_DB_NAME" <<'SQL'
CREATE ROLE :"app_user" LOGIN PASSWORD :'app_password';
CREATE DATABASE :"app_db" OWNER :"app_user";
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
SQL
