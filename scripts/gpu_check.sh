#!/usr/bin/env bash
# The GPU check to run when a GPU machine is at hand for a short while, as one command
# of about 9 minutes: install, `sdcscan doctor --budget 6m`, then where a GPU unit's start-up and its
# cases spend their time (scripts/bench_startup.py, scripts/profile_case.py). Everything goes under
# OUT (default ./gpu-check), eight files at most: the doctor's five, and three logs.
# Usage: OUT=dir bash scripts/gpu_check.sh [doctor budget, default 6m]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check}
budget=${1:-6m}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
    python3 -m pip install --no-deps --no-build-isolation -e . 2>&1 | tail -1
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
    python3 -m sdcscan doctor --budget "$budget" --out "$out/doctor"
    echo "doctor exit $?"
} > "$out/doctor.log" 2>&1
python3 scripts/bench_startup.py --profile doctor --unit cuda:0 > "$out/startup.jsonl" 2>&1
for workload in gemm_int8 matmul_golden train; do
    echo "{\"workload\": \"$workload\"}"
    timeout 90 python3 scripts/profile_case.py --workload "$workload" --profile doctor --unit cuda:0 \
        --cases 2 --top 12 2>&1 | grep '^{'
done > "$out/profile.jsonl"
tail -n 40 "$out/doctor.log"
cat "$out/startup.jsonl" "$out/profile.jsonl"
