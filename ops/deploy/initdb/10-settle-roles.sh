#!/bin/sh
# Run once by the postgres image when its data volume is new (compose.yaml mounts this
# directory at /docker-entrypoint-initdb.d): the two roles of a settle ledger and its
# database, owned by the owner. The passwords come from the container's environment
# (SETTLE_OWNER_PASSWORD, SETTLE_RUNTIME_PASSWORD), never from this file.
#
# settle_owner   owns the database, its schema and tables: `settle migrate` runs as it.
# settle_runtime may log in and nothing more until `settle migrate --grant settle_runtime`
#                (compose's `migrate` service) gives it the rights `--print-grants` lists.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v owner_password="$SETTLE_OWNER_PASSWORD" \
    -v runtime_password="$SETTLE_RUNTIME_PASSWORD" <<'SQL'
CREATE ROLE settle_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE settle_runtime LOGIN PASSWORD :'runtime_password';
CREATE DATABASE settle OWNER settle_owner;
REVOKE ALL ON DATABASE settle FROM PUBLIC;
SQL
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname settle <<'SQL'
ALTER SCHEMA public OWNER TO settle_owner;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL
