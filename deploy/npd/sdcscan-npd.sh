#!/bin/bash
# node-problem-detector custom plugin: the node's last sdcscan verdict, read from its history with
# `sdcscan status --json`. It runs no screen: a screen inside NPD's small pod would be throttled or
# OOM-killed, and would hold NPD for minutes. The screen runs beside it (the DaemonSet, cron or the
# systemd timer), recording into the same history.
#
#   a unit flagged by a failure (sticky until `sdcscan clear UNIT --reason TEXT`)
#                                             -> 1 NonOK  (condition SilentDataCorruption=True)
#   the last run passed, or was interrupted or
#   invalid with nothing flagged              -> 0 OK, its message saying which; an invalid run
#                                                names the units it could not judge and why (a
#                                                busy host: retry later, the node is not at fault)
#   no run recorded, the last one older than SDCSCAN_MAX_AGE_H (default 26) hours, or the
#   history cannot be read                    -> 2 Unknown, saying so
#
# The first line of stdout is the condition's message (NPD truncates it to max_output_length).
# Environment: SDCSCAN, SDCSCAN_STATE_DIR (default /var/lib/sdcscan), SDCSCAN_HISTORY (default
# $SDCSCAN_STATE_DIR/history.sqlite3, where the DaemonSet's runs record), SDCSCAN_MAX_AGE_H,
# SDCSCAN_PYTHON (default python3).
set -u

SDCSCAN=${SDCSCAN:-sdcscan}
STATE=${SDCSCAN_STATE_DIR:-/var/lib/sdcscan}
HISTORY=${SDCSCAN_HISTORY:-$STATE/history.sqlite3}
MAX_AGE_H=${SDCSCAN_MAX_AGE_H:-26}
PYTHON=${SDCSCAN_PYTHON:-python3}
UNKNOWN=2

# `sdcscan status` exits 1 while a unit is flagged: its JSON says so as well, and is what is read.
status=$(timeout -k 1 20 "$SDCSCAN" status --json --history "$HISTORY" 2>/dev/null)
if [ -z "$status" ]; then
    echo "sdcscan: cannot read the screening history $HISTORY (sdcscan status failed)"
    exit $UNKNOWN
fi

printf '%s' "$status" | timeout -s KILL 5 "$PYTHON" -c '
import json, sys, time
from datetime import datetime

OK, NONOK, UNKNOWN = 0, 1, 2
MAX_AGE_H = float(sys.argv[1])


def names(units):
    return ",".join(units[:6]) + (f",+{len(units) - 6}" if len(units) > 6 else "")


def verdict(doc):
    error = doc.get("error")
    if error:  # sdcscan status --json failed, and said why
        return UNKNOWN, f"sdcscan: cannot read the screening history: {error}"
    flagged = names([f["unit"] for f in doc["flagged"]])
    if flagged:
        return NONOK, f"sdcscan: silent data corruption found on {flagged}; flagged until cleared (sdcscan clear UNIT --reason TEXT)"
    last = doc["last_run"]
    if last is None:
        return UNKNOWN, "sdcscan: no screen recorded on this node yet"
    ended = last["ended_at"]
    age_h = (time.time() - datetime.fromisoformat(ended.replace("Z", "+00:00")).timestamp()) / 3600
    if age_h > MAX_AGE_H:
        return UNKNOWN, f"sdcscan: the last screen ended {age_h:.0f} h ago (limit {MAX_AGE_H:g} h): is the screen running?"
    if last["verdict"] == "invalid":
        invalid = [u for u in last["units"] if u["verdict"] == "invalid"]
        busy = bool(invalid) and all("host busy" in (u["reason"] or "") for u in invalid)
        cause = "the host was too busy to screen them (not a hardware verdict; the next screen retries)" if busy else "see sdcscan history"
        which = names([u["unit"] for u in invalid]) or "its units"
        return OK, f"sdcscan: no silent data corruption found; the screen of {ended} could not judge {which}: {cause}"
    if last["verdict"] == "interrupted":
        return OK, f"sdcscan: no silent data corruption found; the screen of {ended} was interrupted"
    count = len(last["units"])
    return OK, f"sdcscan: no silent data corruption found (screen of {ended}, {count} units)"


try:
    code, message = verdict(json.load(sys.stdin))
except Exception as err:
    code, message = UNKNOWN, f"sdcscan: unreadable status ({type(err).__name__})"
print(message)
sys.exit(code)
' "$MAX_AGE_H"
rc=$?
case $rc in
0 | 1) exit $rc ;;
*)
    [ "$rc" -eq 2 ] || echo "sdcscan: could not read the status (exit $rc)"
    exit $UNKNOWN
    ;;
esac
