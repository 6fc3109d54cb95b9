#!/bin/bash
# The DaemonSet's main process: `sdcscan run ARGS...` now and then every SDCSCAN_INTERVAL_S seconds.
#
#   sdcscan-loop --profile quick --out /var/lib/sdcscan/last-report.json --prom /textfile/sdcscan.prom
#
# SIGTERM or SIGINT (kubectl delete, a rolling update, node drain) is passed on to a running
# sdcscan, which writes its partial report marked interrupted; this script then exits with
# sdcscan's status (143 or 130). Between runs it exits 143 or 130 at once. It works as PID 1 (the
# traps below are what make a PID 1 shell see SIGTERM at all) and under tini, which the image
# uses to reap orphans and pass signals on.
#
# A command that cannot be started (exit 126 or 127 from the shell) ends the loop with that status, so
# Kubernetes shows a crash loop rather than a pod that never screens; every sdcscan exit (1 included) is
# only logged: alerting is Prometheus's, on the textfile the run writes.
#
# Environment: SDCSCAN_INTERVAL_S (default 21600), SDCSCAN (command, default sdcscan),
# SDCSCAN_STATE_DIR (where journals of runs older than SDCSCAN_KEEP_DAYS, default 7, are deleted;
# default /var/lib/sdcscan).
set -u

INTERVAL_S=${SDCSCAN_INTERVAL_S:-21600}
SDCSCAN=${SDCSCAN:-sdcscan}
STATE=${SDCSCAN_STATE_DIR:-/var/lib/sdcscan}
KEEP_DAYS=${SDCSCAN_KEEP_DAYS:-7}
child=""
stop_signal=""

# A trapped signal: remember it and pass it on to whatever runs now (sdcscan or the sleep).
on_signal() {
    stop_signal=$1
    if [ -n "$child" ]; then
        kill -s "$1" "$child" 2>/dev/null
    fi
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# Start "$@" in the background as the current child; a signal that came before it started is
# passed on at once.
start() {
    "$@" &
    child=$!
    if [ -n "$stop_signal" ]; then
        kill -s "$stop_signal" "$child" 2>/dev/null
    fi
}

# Wait for the current child and return its exit status. `wait` returns early when a trapped
# signal arrives, while the child is still writing its report: wait again until it has ended.
wait_child() {
    local rc
    while kill -0 "$child" 2>/dev/null; do
        wait "$child"
    done
    wait "$child" # the child's own status: bash keeps it after reaping
    rc=$?
    child=""
    return "$rc"
}

stop_status() {
    case $stop_signal in
    INT) echo 130 ;;
    *) echo 143 ;;
    esac
}

while :; do
    start "$SDCSCAN" run "$@"
    wait_child
    rc=$?
    echo "sdcscan-loop: sdcscan exited $rc" >&2
    if [ -n "$stop_signal" ]; then
        exit "$rc"
    fi
    if [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then
        # The shell could not start sdcscan at all (not found, not executable): a broken image, not a
        # screening result. Exit with it, so the pod restarts visibly instead of sleeping with no run.
        echo "sdcscan-loop: cannot run '$SDCSCAN' (exit $rc: not found or not executable); stopping" >&2
        exit "$rc"
    fi
    find "$STATE" -maxdepth 1 -type f -name '*.journal.jsonl' -mtime "+$KEEP_DAYS" -delete 2>/dev/null
    start sleep "$INTERVAL_S"
    wait_child
    if [ -n "$stop_signal" ]; then
        exit "$(stop_status)"
    fi
done
