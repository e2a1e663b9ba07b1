#!/usr/bin/env bash
# A command for Exec that always writes the same five lines and, on a
# resumed task, writes only what follows the text the client already has
# (the file SWITCHYARD_RESUME_FILE names), after checking that this text
# is the start of its output.
set -euo pipefail

full() {
	for i in 1 2 3 4 5; do
		printf 'line %d\n' "$i"
	done
}

if [ -z "${SWITCHYARD_RESUME_FILE:-}" ]; then
	full
	exit
fi
have=$(wc -c <"$SWITCHYARD_RESUME_FILE")
if ! cmp -s <(full | head -c "$have") "$SWITCHYARD_RESUME_FILE"; then
	echo "the resumed text is not the start of this command's output" >&2
	exit 3
fi
full | tail -c "+$((have + 1))"
