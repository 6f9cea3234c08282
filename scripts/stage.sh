#!/usr/bin/env bash
# Run one stage of `make demo` (or `make docs`) and say how long it took.
#   scripts/stage.sh LABEL COMMAND [ARGS...]
# Prints "[demo] LABEL ..." before and "[demo] LABEL: N s (since the start: M s)" after. The start
# is CONCORD_STAGE_T0 (seconds since the epoch, set once by the Makefile), so the last stage's
# "since the start" is the whole run. The command's exit status is kept.
set -uo pipefail
label="$1"
shift
prefix="[${CONCORD_STAGE_PREFIX:-demo}]"
t0="${CONCORD_STAGE_T0:-$(date +%s)}"
start=$(date +%s)
echo "$prefix $label ..."
"$@"
status=$?
now=$(date +%s)
if [ "$status" -eq 0 ]; then
  echo "$prefix $label: $((now - start)) s (since the start: $((now - t0)) s)"
else
  echo "$prefix $label FAILED (exit $status) after $((now - start)) s" >&2
fi
exit "$status"
