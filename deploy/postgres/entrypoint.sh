#!/usr/bin/env bash
# Make the cluster on first start (as the postgres:16 image does), then run the server.
set -euo pipefail
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
[[ -n ${POSTGRES_PASSWORD:-} ]] || { echo "POSTGRES_PASSWORD must be set." >&2; exit 1; }
as_postgres() { setpriv --reuid postgres --regid postgres --init-groups "$@"; }
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 0700 "$PGDATA"
if [[ ! -s $PGDATA/PG_VERSION ]]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-host=scram-sha-256 \
    --auth-local=trust --encoding=UTF8 -D "$PGDATA" >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [[ $POSTGRES_DB != postgres ]]; then
    as_postgres postgres --single -D "$PGDATA" -c listen_addresses='' postgres \
      <<<"CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" >/dev/null
  fi
fi
if [[ ${1:-} == postgres ]]; then
  shift
  exec setpriv --reuid postgres --regid postgres --init-groups postgres -D "$PGDATA" \
    -c listen_addresses='*' "$@"
fi
exec "$@"
