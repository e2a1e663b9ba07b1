#!/bin/sh
# Starts PostgreSQL as the postgres user; on the first start (an empty
# $PGDATA) it runs initdb with POSTGRES_USER / POSTGRES_PASSWORD and creates
# POSTGRES_DB. Local (socket) connections are trusted, network ones need the
# password (scram-sha-256).
set -eu
POSTGRES_USER=${POSTGRES_USER:-switchyard}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

if [ "$(id -u)" = 0 ]; then
	# A fresh volume may be root's: give it to postgres, then drop root.
	mkdir -p "$PGDATA" /run/postgresql
	chown postgres:postgres "$PGDATA" /run/postgresql
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo "entrypoint: POSTGRES_PASSWORD is not set (put it in deploy/switchyard.env)" >&2
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
		--auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
	rm -f "$pwfile"
	echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
	# Create the database on a server that listens on its socket only, so
	# that nobody connects before it exists.
	pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
	if [ "$POSTGRES_DB" != postgres ]; then
		createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
	fi
	pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
	echo "entrypoint: created the database $POSTGRES_DB for $POSTGRES_USER"
fi

if [ "${1:-}" = postgres ]; then
	shift
	exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
