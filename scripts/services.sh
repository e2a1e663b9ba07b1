# Starts the services switchyard's tests need, installing them from Debian's
# packages (apt-get, as root or with sudo) when they are missing. Sourced by
# scripts/test.sh and scripts/flakehunt.sh, which call the ensure_* functions:
#
#   ensure_postgres   PostgreSQL on 127.0.0.1:5432 answering $SWITCHYARD_TEST_DATABASE_URL
#   ensure_redis      Redis on 127.0.0.1:6379, and the redis-server binary
#   ensure_node       Node.js and npm
#   ensure_chromium   Chromium; sets SWITCHYARD_BROWSER_TEST
#
# It sets the test environment's defaults when they are unset.
# shellcheck shell=bash

export SWITCHYARD_TEST_DATABASE_URL=${SWITCHYARD_TEST_DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable}
export SWITCHYARD_TEST_REDIS_URL=${SWITCHYARD_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		echo "need root to run: $*" >&2; return 1; fi
}

apt_install() {
	say "installing $* from Debian's packages"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Is a TCP port on loopback accepting connections?
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ensure_postgres() {
	if command -v psql >/dev/null && psql "$SWITCHYARD_TEST_DATABASE_URL" -Atqc 'select 1' >/dev/null 2>&1; then
		return
	fi
	if ! command -v pg_ctlcluster >/dev/null || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
		apt_install postgresql postgresql-client
	fi
	local ver
	ver=$(ls /etc/postgresql | sort -V | tail -n1)
	if ! port_open 5432; then
		say "starting PostgreSQL $ver"
		as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
	fi
	for _ in $(seq 1 50); do port_open 5432 && break; sleep 0.2; done
	# A fresh cluster asks for a password over TCP: give the postgres role
	# the one in the default URL, and create the test database.
	as_root su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
	as_root su postgres -c "createdb test" 2>/dev/null || true
	psql "$SWITCHYARD_TEST_DATABASE_URL" -Atqc 'select 1' >/dev/null ||
		{ echo "PostgreSQL is running but $SWITCHYARD_TEST_DATABASE_URL does not work" >&2; exit 1; }
}

# The shared Redis on 6379, and the redis-server binary even when that Redis
# runs elsewhere (a container): tests start private servers and a 3-master
# Redis Cluster of their own on free ports (internal/redistest), and skip
# those tests without it. redis-cli (redis-tools) is for looking at them.
ensure_redis() {
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		apt_install redis-server redis-tools
	fi
	if port_open 6379; then return; fi
	say "starting Redis"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
	for _ in $(seq 1 50); do port_open 6379 && return; sleep 0.1; done
	echo "Redis did not start on 127.0.0.1:6379" >&2
	exit 1
}

# Node.js and npm run two tests: the OpenAI API driven by the real openai
# package (server/testdata/openai), skipped without them, and the dashboard's
# browser test, whose script drives Chromium with the playwright-core package
# (server/testdata/dashboard), which fails without them (see ensure_chromium).
ensure_node() {
	command -v node >/dev/null && command -v npm >/dev/null && return
	apt_install nodejs npm ||
		echo "could not install Node.js; the OpenAI client-library test will be skipped and the dashboard's browser test will fail" >&2
}

# Chromium shows the dashboard in the browser test
# (server/dashboard_browser_test.go), driven by Node.js with playwright-core;
# with SWITCHYARD_BROWSER_TEST set, that test fails rather than skips when it
# finds no browser or no Node.js.
ensure_chromium() {
	command -v chromium >/dev/null || apt_install chromium
	export SWITCHYARD_BROWSER_TEST=1
}

