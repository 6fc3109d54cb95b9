#!/bin/bash
# sdcscan Slurm health check: drain this node when sdcscan finds silent data corruption.
#
# As HealthCheckProgram (slurm.conf: HealthCheckProgram=/usr/local/sbin/sdcscan-healthcheck.sh).
# slurmd kills a HealthCheckProgram that runs longer than 60 s, so everything here is bounded:
# the sticky-flag check (4 s), the `healthcheck` profile (20 s budget, ends within 38 s) under a
# hard `timeout` of 42 s + 3 s, reading the report (2 s) and scontrol (5 s): at most 56 s.
# Longer screens (quick, burnin) run as a batch job with the same policy: sdcscan-screen.sbatch.
#
# Drain policy:
#   a unit still flagged from an earlier failure (sticky until `sdcscan clear UNIT --reason TEXT`)
#                                  -> drain "sdcscan: flagged cpu:3 ..." (checked first; no run)
#   sdcscan exit 1 (SDC suspected) -> drain "sdcscan: fail cpu:3", the unit named by the report or,
#                                     when the report could not be written, by the run's log; an exit 1
#                                     that names no unit is logged and never drained on
#   the log cannot be written (a full or read-only state disk) -> logged, not screening, never drained
#   sdcscan exit 3 (invalid: could not judge a unit) -> drain "sdcscan: invalid cpu:3", except when
#                                     every unit it could not judge was starved by other work (its
#                                     reason says "host busy"): logged, never drained (retry later)
#   exit 3 "another sdcscan run is active", exit 2 (configuration), 130/143 (interrupted),
#   124/137 (stopped by the time bound, report marked interrupted), anything else
#                                  -> logged, never drained on
#   sdcscan exit 0 with no unit flagged, on a node drained by this script (its reason begins
#   "sdcscan:") -> resumed; a node drained for any other reason is left drained
# This script exits 1 after draining, else 0.
#
# GPU nodes: a GPU unit took 37-46 s to start, and 13.55 s on an H200 since issue 42 (README "On a GPU":
# the doctor profile, a fresh state directory), most of the healthcheck's 20 s budget; so with the
# healthcheck profile on a node with a GPU (/dev/nvidia0) this check screens the
# CPUs only (`--units cpu`) and sdcscan-screen.sbatch, whose profile is longer, screens the GPUs.
#
# Environment: SDCSCAN (command, default sdcscan), SDCSCAN_PROFILE (default healthcheck),
# SDCSCAN_STATE_DIR (default /var/lib/sdcscan), SDCSCAN_REPORT (default
# $SDCSCAN_STATE_DIR/last-report.json), SDCSCAN_ARGS (extra arguments for `sdcscan run`),
# SDCSCAN_TIMEOUT_S (hard bound of the run, default 42; SIGTERM then, SIGKILL
# SDCSCAN_KILL_AFTER_S = 3 s later), SDCSCAN_PYTHON (reads the JSON report, default python3),
# SDCSCAN_UNITS (`--units`; default all, cpu on a GPU node with the healthcheck profile),
# SDCSCAN_GPU_DEVICE (what marks a GPU node, default /dev/nvidia0), SCONTROL (default scontrol).
set -u

SDCSCAN=${SDCSCAN:-sdcscan}
PROFILE=${SDCSCAN_PROFILE:-healthcheck}
STATE=${SDCSCAN_STATE_DIR:-/var/lib/sdcscan}
REPORT=${SDCSCAN_REPORT:-$STATE/last-report.json}
PYTHON=${SDCSCAN_PYTHON:-python3}
SCONTROL=${SCONTROL:-scontrol}
# Time bounds in seconds; tests/test_deploy.py checks that they add up to less than 60.
RUN_TIMEOUT_S=${SDCSCAN_TIMEOUT_S:-42}
KILL_AFTER_S=${SDCSCAN_KILL_AFTER_S:-3}
STATUS_TIMEOUT_S=3
READ_TIMEOUT_S=2
SCONTROL_TIMEOUT_S=4
SHOW_TIMEOUT_S=2 # `scontrol show node`, on the passing path only (then no report is read)
KEEP_JOURNALS=5 # every run leaves <report stem>.<run id>.journal.jsonl; keep the newest few
UNITS=${SDCSCAN_UNITS:-}
if [ -z "$UNITS" ] && [ "$PROFILE" = healthcheck ] && [ -e "${SDCSCAN_GPU_DEVICE:-/dev/nvidia0}" ]; then
    UNITS=cpu # the GPUs' start-up outlasts this profile: sdcscan-screen.sbatch screens them
fi
NODE=$(hostname -s)
LOG="${REPORT%.json}.log"

log() { logger -t sdcscan-healthcheck -- "$*" 2>/dev/null; echo "sdcscan-healthcheck: $*" >&2; }

# Units the run's log shows failing (its verdict table), for a report that could not be written.
failed_in_log() {
    grep -oE '^ *(cpu|cuda):[0-9]+ +fail ' "$LOG" 2>/dev/null | awk '{print $1}' | head -n 6 | paste -sd, -
}

# Units with a given verdict in the report, comma-separated, at most 6 named (a drain reason is short).
units_with() {
    timeout -s KILL "$READ_TIMEOUT_S" "$PYTHON" - "$REPORT" "$1" <<'PY' 2>/dev/null
import json, sys
try:
    with open(sys.argv[1]) as f:
        units = [u["id"] for u in json.load(f)["units"] if u["verdict"] in sys.argv[2].split(",")]
except Exception:
    units = []
print(",".join(units[:6]) + (f",+{len(units) - 6}" if len(units) > 6 else ""))
PY
}

# For an invalid run: "busy" when its only trouble is starved units (each invalid unit's reason says
# "host busy": the runner measured it waiting for a CPU, and none failed), not the node's fault and never
# drained on; else the units it could not judge or that failed, as units_with (one read of the report).
invalid_units_or_busy() {
    timeout -s KILL "$READ_TIMEOUT_S" "$PYTHON" - "$REPORT" <<'PY' 2>/dev/null
import json, sys
try:
    with open(sys.argv[1]) as f:
        units = json.load(f)["units"]
except Exception:
    units = []
invalid = [u for u in units if u["verdict"] == "invalid"]
bad = [u["id"] for u in units if u["verdict"] in ("fail", "invalid")]
if invalid and len(invalid) == len(bad) and all("host busy" in (u["reason"] or "") for u in invalid):
    print("busy")
else:
    print(",".join(bad[:6]) + (f",+{len(bad) - 6}" if len(bad) > 6 else ""))
PY
}

# Units still flagged in the history (sticky failures), comma-separated; empty when none or unknown.
flagged_units() {
    timeout -k 1 "$STATUS_TIMEOUT_S" "$SDCSCAN" status --json --history "$STATE/history.sqlite3" 2>/dev/null |
        timeout -s KILL "$READ_TIMEOUT_S" "$PYTHON" -c '
import json, sys
try:
    print(",".join(f["unit"] for f in json.load(sys.stdin)["flagged"]))
except Exception:
    pass'
}

drain() {
    log "draining $NODE: $1"
    timeout -k 1 "$SCONTROL_TIMEOUT_S" "$SCONTROL" update nodename="$NODE" state=drain reason="$1"
    exit 1
}

# A passing screen returns a node this script drained to service (NHC's way); a drain of another
# reason (an admin's, another health check's) is never touched.
resume_if_drained_by_us() {
    local info
    info=$(timeout -k 1 "$SHOW_TIMEOUT_S" "$SCONTROL" show node "$NODE" 2>/dev/null) || return 0
    if grep -qE 'State=[^ ]*DRAIN' <<<"$info" && grep -q 'Reason=sdcscan:' <<<"$info"; then
        log "resuming $NODE: the screen passed and no unit is flagged"
        timeout -k 1 "$SCONTROL_TIMEOUT_S" "$SCONTROL" update nodename="$NODE" state=resume
    fi
}

# Journals of earlier runs beside the report, oldest first past the newest KEEP_JOURNALS.
prune_journals() {
    local stem
    stem=$(basename "${REPORT%.json}")
    find "$(dirname "$REPORT")" -maxdepth 1 -type f -name "$stem.*.journal.jsonl" -printf '%T@ %p\n' 2>/dev/null |
        sort -rn | tail -n +$((KEEP_JOURNALS + 1)) | cut -d' ' -f2- | xargs -r -d '\n' rm -f --
}

# Run the screen under the hard bound; its exit status, or 124/137 when the bound stopped it.
run_screen() {
    # shellcheck disable=SC2086  # SDCSCAN_ARGS is deliberately split into words
    timeout --signal=TERM --kill-after="$KILL_AFTER_S" "$RUN_TIMEOUT_S" \
        "$SDCSCAN" run --profile "$PROFILE" --out "$REPORT" ${UNITS:+--units "$UNITS"} \
        --history "$STATE/history.sqlite3" ${SDCSCAN_ARGS:-} >"$LOG" 2>&1
}

act_on() {
    case $1 in
    0)
        resume_if_drained_by_us
        exit 0
        ;;
    1)
        local failed
        failed=$(units_with fail)
        failed=${failed:-$(failed_in_log)}
        if [ -z "$failed" ]; then
            log "sdcscan exited 1 but neither its report nor its log names a failing unit; not draining; see $LOG"
            exit 0
        fi
        drain "sdcscan: fail $failed"
        ;;
    3)
        if grep -q "another sdcscan run is active" "$LOG"; then
            log "skipped: another sdcscan run is active"
            exit 0
        fi
        local units
        units=$(invalid_units_or_busy)
        if [ "$units" = busy ]; then
            log "the host was too busy to screen (units starved of CPU, not a hardware verdict); not draining;" \
                "retry when it is quieter; see $LOG"
            exit 0
        fi
        drain "sdcscan: invalid ${units:-run, see $LOG}"
        ;;
    124 | 137)
        log "sdcscan did not end within ${RUN_TIMEOUT_S} s and was stopped (report marked interrupted);" \
            "not draining; shorten the budget (SDCSCAN_ARGS=--budget 15s); see $LOG"
        exit 0
        ;;
    *)
        log "sdcscan exited $1 (2 = configuration error, 130/143 = interrupted); not draining; see $LOG"
        exit 0
        ;;
    esac
}

mkdir -p "$STATE" "$(dirname "$REPORT")" || {
    log "cannot create $STATE; not screening"
    exit 0
}
flagged=$(flagged_units)
if [ -n "$flagged" ]; then
    drain "sdcscan: flagged $flagged (sdcscan clear UNIT --reason TEXT)"
fi
rm -f "$REPORT"
# Bash fails a redirect it cannot open with status 1, which must never read as sdcscan's "fail".
if ! : >"$LOG" 2>/dev/null; then
    log "cannot write $LOG (state disk full or read-only?); not screening"
    exit 0
fi
prune_journals
run_screen
act_on $?
