#!/bin/sh
# First start: initdb into $PGDATA, with POSTGRES_USER as the superuser (password auth over TCP, trust
# only on the container's unix socket) and POSTGRES_DB created. Every start: exec postgres in the
# foreground, listening on AGENTRL_PG_LISTEN:AGENTRL_PG_PORT.
set -eu
user="${POSTGRES_USER:-agentrl}"
database="${POSTGRES_DB:-agentrl}"
[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "postgres: set POSTGRES_PASSWORD" >&2; exit 2; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password_file="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
    initdb -D "$PGDATA" -U "$user" --pwfile="$password_file" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$password_file"
    echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "host all all ::/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k /var/run/postgresql" -w start >/dev/null
    createdb -h /var/run/postgresql -U "$user" "$database"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres: initialised $PGDATA (user $user, database $database)"
fi
exec postgres -D "$PGDATA" -c listen_addresses="$AGENTRL_PG_LISTEN" -p "$AGENTRL_PG_PORT" \
    -c unix_socket_directories=/var/run/postgresql
