#!/bin/bash
# node-problem-detector custom plugin: run sdcscan and map its exit code to NPD's convention.
#
#   sdcscan exit 0 and no unit flagged        -> 0 OK
#   sdcscan exit 1 (SDC suspected) naming a unit,
#   or a unit still flagged from an earlier
#   failure                                   -> 1 NonOK  (condition SilentDataCorruption=True)
#   exit 1 that names no unit, or the log
#   cannot be written (a full state disk)     -> 2 Unknown, saying so
#   anything else: 2 usage, 3 invalid, 130/143
#   interrupted, another run active           -> 2 Unknown
#
# The first line of stdout is the condition's message (NPD truncates it to max_output_length).
# Environment: SDCSCAN, SDCSCAN_PROFILE (default quick), SDCSCAN_STATE_DIR (default
# /var/lib/sdcscan), SDCSCAN_ARGS, SDCSCAN_PYTHON (default python3).
set -u

SDCSCAN=${SDCSCAN:-sdcscan}
PROFILE=${SDCSCAN_PROFILE:-quick}
STATE=${SDCSCAN_STATE_DIR:-/var/lib/sdcscan}
PYTHON=${SDCSCAN_PYTHON:-python3}
REPORT="$STATE/last-report.json"
LOG="$STATE/last-run.log"
OK=0
NONOK=1
UNKNOWN=2

units_with() {
    "$PYTHON" - "$REPORT" "$1" <<'PY' 2>/dev/null
import json, sys
try:
    units = [u["id"] for u in json.load(open(sys.argv[1]))["units"] if u["verdict"] in sys.argv[2].split(",")]
except Exception:
    units = []
print(",".join(units[:6]) + (f",+{len(units) - 6}" if len(units) > 6 else ""))
PY
}

flagged_units() {
    "$SDCSCAN" status --json --history "$STATE/history.sqlite3" 2>/dev/null | "$PYTHON" -c '
import json, sys
try:
    print(",".join(f["unit"] for f in json.load(sys.stdin)["flagged"]))
except Exception:
    pass'
}

mkdir -p "$STATE" || { echo "sdcscan: cannot create $STATE"; exit $UNKNOWN; }
# Bash fails a redirect it cannot open with status 1, which must never read as sdcscan's "fail".
: >"$LOG" 2>/dev/null || { echo "sdcscan: cannot write $LOG (state disk full or read-only?); not screened"; exit $UNKNOWN; }
rm -f "$REPORT"
# Every run leaves its journal (last-report.<run id>.journal.jsonl): keep a week of them.
find "$STATE" -maxdepth 1 -type f -name 'last-report.*.journal.jsonl' -mtime +7 -delete 2>/dev/null
# shellcheck disable=SC2086  # SDCSCAN_ARGS is deliberately split into words
"$SDCSCAN" run --profile "$PROFILE" --out "$REPORT" --history "$STATE/history.sqlite3" \
    ${SDCSCAN_ARGS:-} >"$LOG" 2>&1
rc=$?

case $rc in
0) ;;
1)
    failed=$(units_with fail)
    failed=${failed:-$(grep -oE '^ *(cpu|cuda):[0-9]+ +fail ' "$LOG" 2>/dev/null | awk '{print $1}' | head -n 6 | paste -sd, -)}
    if [ -z "$failed" ]; then
        echo "sdcscan: exited 1 but neither its report nor its log names a failing unit, see $LOG"
        exit $UNKNOWN
    fi
    echo "sdcscan: silent data corruption suspected on $failed"
    exit $NONOK
    ;;
3)
    if grep -q "another sdcscan run is active" "$LOG"; then
        echo "sdcscan: skipped, another sdcscan run is active"
    else
        units=$(units_with invalid)
        echo "sdcscan: could not judge ${units:-this node} (invalid run, see $LOG)"
    fi
    exit $UNKNOWN
    ;;
*)
    echo "sdcscan: exited $rc (2 = configuration error, 130/143 = interrupted), see $LOG"
    exit $UNKNOWN
    ;;
esac

flagged=$(flagged_units)
if [ -n "$flagged" ]; then
    echo "sdcscan: $flagged failed earlier and is still flagged (sdcscan clear UNIT --reason TEXT)"
    exit $NONOK
fi
echo "sdcscan: no silent data corruption found"
exit $OK
