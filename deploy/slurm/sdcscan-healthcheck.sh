#!/bin/bash
# sdcscan Slurm health check: drain this node when sdcscan finds silent data corruption.
#
# Use as HealthCheckProgram (slurm.conf: HealthCheckProgram=/usr/local/sbin/sdcscan-healthcheck.sh)
# or as Prolog (Prolog=/usr/local/sbin/sdcscan-healthcheck.sh; give it a short profile, e.g.
# SDCSCAN_PROFILE=ripple, since it runs before every job).
#
# sdcscan exit 1 (SDC suspected) or 3 (invalid: could not judge) -> scontrol drains the node with a
# reason naming the failed units, e.g. "sdcscan: fail cpu:3", and this script exits 1 (a failing
# Prolog also makes Slurm requeue the job). A unit still flagged from an earlier failure (sticky,
# until `sdcscan clear UNIT --reason TEXT`) drains the node too. Exit 2 (bad configuration),
# 130/143 (interrupted) and "another sdcscan run is active" are logged, never drained on.
#
# Environment: SDCSCAN (command, default sdcscan), SDCSCAN_PROFILE (default quick),
# SDCSCAN_STATE_DIR (default /var/lib/sdcscan), SDCSCAN_ARGS (extra arguments for `sdcscan run`),
# SDCSCAN_PYTHON (python used to read the JSON report, default python3), SCONTROL (default scontrol).
set -u

SDCSCAN=${SDCSCAN:-sdcscan}
PROFILE=${SDCSCAN_PROFILE:-quick}
STATE=${SDCSCAN_STATE_DIR:-/var/lib/sdcscan}
PYTHON=${SDCSCAN_PYTHON:-python3}
SCONTROL=${SCONTROL:-scontrol}
NODE=$(hostname -s)
REPORT="$STATE/last-report.json"
LOG="$STATE/last-run.log"

log() { logger -t sdcscan-healthcheck -- "$*" 2>/dev/null; echo "sdcscan-healthcheck: $*" >&2; }

# Units with a given verdict in the report, comma-separated, at most 6 named (a drain reason is short).
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

# Units still flagged in the history (sticky failures), comma-separated.
flagged_units() {
    "$SDCSCAN" status --json --history "$STATE/history.sqlite3" 2>/dev/null | "$PYTHON" -c '
import json, sys
try:
    print(",".join(f["unit"] for f in json.load(sys.stdin)["flagged"]))
except Exception:
    pass'
}

drain() {
    log "draining $NODE: $1"
    "$SCONTROL" update nodename="$NODE" state=drain reason="$1"
    exit 1
}

mkdir -p "$STATE" || { log "cannot create $STATE"; exit 0; }
rm -f "$REPORT"
# shellcheck disable=SC2086  # SDCSCAN_ARGS is deliberately split into words
"$SDCSCAN" run --profile "$PROFILE" --out "$REPORT" \
    --history "$STATE/history.sqlite3" ${SDCSCAN_ARGS:-} >"$LOG" 2>&1
rc=$?

case $rc in
0) ;;
1) drain "sdcscan: fail $(units_with fail)" ;;
3)
    if grep -q "another sdcscan run is active" "$LOG"; then
        log "skipped: another sdcscan run is active"
        exit 0
    fi
    units=$(units_with fail,invalid)
    drain "sdcscan: invalid ${units:-run, see $LOG}"
    ;;
*)
    log "sdcscan exited $rc (2 = configuration error, 130/143 = interrupted); not draining; see $LOG"
    exit 0
    ;;
esac

flagged=$(flagged_units)
if [ -n "$flagged" ]; then
    drain "sdcscan: flagged $flagged (sdcscan clear UNIT --reason TEXT)"
fi
exit 0
