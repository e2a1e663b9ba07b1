#!/usr/bin/env bash
# Runs switchyard's whole test suite with the race detector.
#
# It needs PostgreSQL and Redis on loopback, the redis-server binary (tests
# start private servers and a Redis Cluster with it), Node.js and npm for two
# tests (the openai npm package; the dashboard, in a real browser, driven by
# the playwright-core npm package) and Chromium for the second. When they are
# missing it installs them from Debian's packages (apt-get, as root or with
# sudo) and starts them, so a fresh machine with only Go can run it:
#
#   ./scripts/test.sh            # everything: vet, tests with -race, short fuzzing
#   ./scripts/test.sh ./store/   # only some packages of the root module (no fuzzing)
#
# Environment:
#   SWITCHYARD_TEST_DATABASE_URL  PostgreSQL for the tests
#                                 (default postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable)
#   SWITCHYARD_TEST_REDIS_URL     Redis for the tests (default redis://127.0.0.1:6379/0)
#   FUZZTIME                      each fuzz target's budget, as go test -fuzztime takes it
#                                 (default 10000x: executions, not seconds, because Go 1.26's fuzz
#                                 coordinator can fail a target whose time runs out mid-call;
#                                 0 skips fuzzing)
#   SWITCHYARD_BROWSER_TEST       set here: the dashboard's browser test fails without Chromium or Node.js
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/services.sh
. scripts/services.sh
FUZZTIME=${FUZZTIME:-10000x}

ensure_postgres
ensure_redis
ensure_node
ensure_chromium

pkgs=("${@:-./...}")
say "go vet"
go vet "${pkgs[@]}"
if [ $# -eq 0 ]; then
	# The load test is a module of its own (loadtest/go.mod), so that its
	# embedded NATS server is not a dependency of the coordinator or its SDK.
	go -C loadtest vet ./...
	# The multi-process tests (they start instances of the built binary) and
	# the load test judge timings, so they run after the others, one package
	# at a time, on an otherwise quiet machine.
	mapfile -t parallel < <(go list ./... | grep -v -e /internal/clustertest)
	# The slow-reader flood test streams millions of chunks to a slow TCP
	# client; beside the other packages' -race runs on 2 cores it takes a
	# minute (docs/TESTING.md), so it runs with the serial ones.
	quiet=TestSlowStreamReaderFloodStaysFlat
	say "go test -race (in-process packages)"
	go test -race -count=1 -timeout 20m -skip "^$quiet\$" "${parallel[@]}"
	say "go test -race ./internal/clustertest, ./loadtest and $quiet (one package at a time)"
	go test -race -count=1 -timeout 20m -run "^$quiet\$" ./server
	go test -race -count=1 -timeout 20m -p 1 ./internal/clustertest
	go -C loadtest test -race -count=1 -timeout 20m -p 1 ./...
else
	say "go test -race ${pkgs[*]}"
	go test -race -count=1 -timeout 20m "${pkgs[@]}"
fi

if [ $# -eq 0 ] && [ "$FUZZTIME" != 0 ]; then
	# Each fuzz target, briefly, from its checked-in corpus (testdata/fuzz).
	for target in $(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do
		dir=$(dirname "$target")
		for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$target" | cut -d' ' -f2); do
			say "fuzz $dir $fn ($FUZZTIME)"
			out=$(mktemp)
			if ! go test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" "$dir" >"$out" 2>&1; then
				# Its output says what failed; an input that fails it is kept
				# in $dir/testdata/fuzz/$fn/, which go test then runs as a test.
				cat "$out"
				rm -f "$out"
				exit 1
			fi
			rm -f "$out"
		done
	done
fi
say "all tests passed"
