#!/usr/bin/env bash
# The GPU check to run when a GPU machine is at hand for a short while, as one command of about 9
# minutes (issue 42): install; the cost model's predictions beside warm cases (scripts/model_vs_gpu.py);
# torch._int_mm at inner dimensions and widths 8192, 8200 and 8224/8256, the fused check kernels (the fingerprint's and gemm_fp's too) compiled, bit for bit
# against the torch checks and timed (scripts/check_fused.py, into int_mm.jsonl); whether the fp8 slots'
# products of small integers are exact up to k = 8,192 (scripts/check_fp8.py, into int_mm.jsonl); a 30 s gemm_int8-only
# run sampled every 100 ms; a GPU unit's start-up (scripts/bench_startup.py); then `sdcscan doctor` with what remains of 520 s.
# Everything goes under OUT (default ./gpu-check), eight files at most: gpu_check.log, model_vs_gpu.jsonl,
# int_mm.jsonl, int8_run.json, startup.jsonl, and the doctor's doctor.json, doctor.md, reports.tar.gz.
# Usage: OUT=dir bash scripts/gpu_check.sh [total seconds, default 520]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-gpu-check}
total=${1:-520}
began=$(date +%s)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export XDG_STATE_HOME=${XDG_STATE_HOME:-$(mktemp -d)}
log="$out/gpu_check.log"
step() { echo "== $1 ($(($(date +%s) - began)) s)" >> "$log"; }
{
    step install
    python3 -m pip install --no-deps --no-build-isolation -e . 2>&1 | tail -1
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
} >> "$log" 2>&1
step "model beside warm cases"
timeout 170 python3 scripts/model_vs_gpu.py --profile doctor --unit cuda:0 > "$out/model_vs_gpu.jsonl" 2>> "$log"
step "int_mm widths"
timeout 60 python3 scripts/bench_int_mm_width.py --unit cuda:0 > "$out/int_mm.jsonl" 2>> "$log"
step "fused check kernels"
timeout 120 python3 scripts/check_fused.py --unit cuda:0 --profile doctor >> "$out/int_mm.jsonl" 2>> "$log"
echo "fused check exit $?" >> "$log"
step "fp8 exactness"
timeout 60 python3 scripts/check_fp8.py --unit cuda:0 >> "$out/int_mm.jsonl" 2>> "$log"
echo "fp8 check exit $?" >> "$log"
step "gemm_int8 for 30 s, telemetry every 100 ms"
timeout 90 python3 -m sdcscan run -p doctor --units cuda:0 --workloads gemm_int8 --budget 30s \
    --telemetry-interval 0.1 --no-history -o "$out/int8_run.json" >> "$log" 2>&1
echo "run exit $?" >> "$log"
rm -f "$out"/int8_run.*.journal.jsonl  # its report holds every case; a ninth file would not come back
step "start-up"
timeout 90 python3 scripts/bench_startup.py --profile doctor --unit cuda:0 > "$out/startup.jsonl" 2>> "$log"
left=$((total - ($(date +%s) - began)))
step "doctor with ${left} s"
if [ "$left" -ge 120 ]; then
    python3 -m sdcscan doctor --budget "${left}s" --out "$out/doctor" >> "$log" 2>&1
    echo "doctor exit $?" >> "$log"
    rm -f "$out/doctor/journals.tar.gz" "$out/doctor/logs.tar.gz"  # eight files back at most
else
    echo "doctor skipped: ${left} s left" >> "$log"
fi
step finished
tail -n 30 "$log"
cat "$out/model_vs_gpu.jsonl" "$out/int_mm.jsonl" "$out/startup.jsonl"
