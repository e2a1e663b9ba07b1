#!/usr/bin/env bash
# Hunts flaky tests: runs switchyard's tests several times, in shuffled order,
# on a machine kept busy, and lists every test that failed with the shuffle
# seed that reproduces its order.
#
#   ./scripts/flakehunt.sh               # both phases below (about 35 minutes on 2 cores)
#   ./scripts/flakehunt.sh ./nodes/      # phase 1 only, for these packages
#   COUNT=10 ./scripts/flakehunt.sh ./streamlog/
#
# Phase 1: the in-process packages of the root module (all but
# ./internal/clustertest; TestSlowStreamReaderFloodStaysFlat runs in phase 2)
# with -race -shuffle=on -count=$COUNT while a CPU hog keeps every core busy
# (stress-ng from Debian's packages, installed when missing; a shell busy loop
# per core when it cannot be). An in-process test judges time only through an
# injected clock or testing/synctest, so a busy machine must not fail it.
# Phase 2: the tests that judge real timings — ./internal/clustertest,
# TestSlowStreamReaderFloodStaysFlat and the load test (go -C loadtest) — with
# -race -shuffle=on -count=$COUNT -p 1 and no hog, as scripts/test.sh runs them.
#
# It starts PostgreSQL and Redis as scripts/test.sh does (scripts/services.sh),
# writes the whole output to $LOG, and exits non-zero when anything failed. A
# failure is reproduced with the seed it prints:
#   go test -race -shuffle=SEED -run '^TestName$' ./pkg
#
# Environment:
#   COUNT   runs of each test per phase (default 3)
#   LOG     where the full output goes (default a new file under ${TMPDIR:-/tmp})
#   HOG     0 runs phase 1 without the CPU hog (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h | --help | help) usage; exit 0 ;; esac

COUNT=${COUNT:-3}
HOG=${HOG:-1}
LOG=${LOG:-$(mktemp "${TMPDIR:-/tmp}/flakehunt.XXXXXX.log")}
quiet=TestSlowStreamReaderFloodStaysFlat

# shellcheck source=scripts/services.sh
. scripts/services.sh
ensure_postgres
ensure_redis
ensure_node
ensure_chromium

hog_pids=()
stop_hog() {
	local p
	for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	hog_pids=()
}
trap stop_hog EXIT
start_hog() {
	local cores
	cores=$(nproc)
	if ! command -v stress-ng >/dev/null; then
		apt_install stress-ng || true
	fi
	if command -v stress-ng >/dev/null; then
		say "CPU hog: stress-ng --cpu $cores"
		stress-ng --cpu "$cores" --quiet &
		hog_pids+=($!)
	else
		say "CPU hog: $cores shell busy loops (no stress-ng)"
		for _ in $(seq "$cores"); do
			bash -c 'while :; do :; done' &
			hog_pids+=($!)
		done
	fi
}

started=$SECONDS
failed=0
# run LABEL CMD...: runs a go test command, its output to the terminal (the
# package lines, as progress) and to $LOG, and notes its failures.
run() {
	local label=$1 rc=0
	shift
	say "$label: $*"
	echo "### $label: $*" >>"$LOG"
	set +e
	"$@" 2>&1 | tee -a "$LOG" | grep --line-buffered -E '^(ok|FAIL|---|panic:)'
	rc=${PIPESTATUS[0]}
	set -e
	[ "$rc" = 0 ] || failed=1
	say "$label: exit $rc after $((SECONDS - started))s"
}

if [ $# -gt 0 ]; then
	pkgs=("$@")
else
	mapfile -t pkgs < <(go list ./... | grep -v -e /internal/clustertest)
fi
say "logging to $LOG"
: >"$LOG" # a LOG given again starts empty: its failures are this run's only
[ "$HOG" = 0 ] || start_hog
run "phase 1 (busy machine)" go test -race -shuffle=on -count="$COUNT" -timeout 60m -skip "^$quiet\$" "${pkgs[@]}"
stop_hog

if [ $# -eq 0 ]; then
	run "phase 2 ($quiet)" go test -race -shuffle=on -count="$COUNT" -timeout 30m -run "^$quiet\$" ./server
	run "phase 2 (clustertest)" go test -race -shuffle=on -count="$COUNT" -timeout 60m -p 1 ./internal/clustertest
	run "phase 2 (loadtest)" go -C loadtest test -race -shuffle=on -count="$COUNT" -timeout 60m -p 1 ./...
fi

# The failures, each with the seed of its test binary: go test prints
# "-test.shuffle SEED" at the start of a binary's output and shows the output
# of failing packages only.
report=$(awk '
	/^-test\.shuffle / { seed = $2 }
	/^[ \t]*--- FAIL: / { t = $3; sub(/^[ \t]*/, "", t); n++; tests[n] = t; seeds[n] = seed; pend[n] = 1 }
	/^panic: / && !inpanic { n++; tests[n] = "(panic) " substr($0, 8, 60); seeds[n] = seed; pend[n] = 1; inpanic = 1 }
	/^(FAIL|ok)[ \t]+[^ \t]+/ && NF >= 2 && $2 != "" {
		for (i in pend) { pkgs[i] = $2 }
		delete pend
		inpanic = 0
	}
	/^FAIL[ \t]+[^ \t]+[ \t]+\[/ { n++; tests[n] = $3 " " $4; pkgs[n] = $2; seeds[n] = "-" }
	END { for (i = 1; i <= n; i++) printf "%-60s %-50s seed %s\n", tests[i], pkgs[i], seeds[i] }
' "$LOG")

say "flake hunt finished after $((SECONDS - started))s; full output in $LOG"
if [ "$failed" != 0 ] || [ -n "$report" ]; then
	echo "FAILED:"
	if [ -n "$report" ]; then echo "$report"; else echo "(a go test exited non-zero; see $LOG)"; fi
	echo "reproduce: go test -race -shuffle=SEED -run '^TestName\$' PACKAGE"
	exit 1
fi
echo "no test failed"
