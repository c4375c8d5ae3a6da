#!/usr/bin/env bash
# Services the test-suite uses: a local PostgreSQL for the tuning_db tests.
#
# Installs PostgreSQL from Debian's packages when missing (as root), then runs a private server as
# the non-root `postgres` user (or as the calling user when not root) on 127.0.0.1:$PORT with its
# data under $PGROOT, creates the test database, and writes its URL to $PGROOT/url, which
# tests/tuning_db/conftest.py reads. Idempotent: a running server is reused and the run takes
# well under a second.
set -euo pipefail

PGROOT=${AUTORELAY_PG_DIR:-/tmp/autorelay-pg}
PORT=${AUTORELAY_PG_PORT:-54329}
DBNAME=autorelay_test

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

BIN=$(bindir || true)
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-services: PostgreSQL is not installed and this is not root: PostgreSQL tests will skip" >&2
    exit 0
  fi
  echo "setup-services: installing PostgreSQL from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  BIN=$(bindir)
fi

if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PGROOT" --shell /bin/sh postgres
  as_pg() { runuser -u postgres -- "$@"; }
  mkdir -p "$PGROOT"
  chown postgres: "$PGROOT"
else
  as_pg() { "$@"; }
  mkdir -p "$PGROOT"
fi
chmod 755 "$PGROOT"

DATA=$PGROOT/data
if [ ! -f "$DATA/PG_VERSION" ]; then
  as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
fi
if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  # fsync=off: a test server; the clients' crash tests kill clients, never this server.
  as_pg "$BIN/pg_ctl" -D "$DATA" -l "$PGROOT/server.log" -w -t 60 \
    -o "-p $PORT -k $PGROOT -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
    start >/dev/null
fi

psql_() { as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAX "$@"; }
if [ "$(psql_ -c "SELECT 1 FROM pg_database WHERE datname = '$DBNAME'")" != "1" ]; then
  psql_ -c "CREATE DATABASE $DBNAME"
fi
echo "postgresql://postgres@127.0.0.1:$PORT/$DBNAME" >"$PGROOT/url"
chmod 644 "$PGROOT/url"
echo "setup-services: PostgreSQL ready at $(cat "$PGROOT/url")" >&2
