"""The rates the cost model turns counts into seconds with, per device class, and the prediction itself.

Each figure names where it comes from. Datasheet rates are ceilings; measured ones are what torch reached
on a lent machine of this workplace (the device tool's notes on the H200: a device-to-device copy at about
4.3 TB/s counting bytes read and written, an 8192³ bf16 matmul at 769-798 TFLOP/s on random data) or in
sdcscan's own GPU runs (README "On a GPU": `torch._int_mm` at 8192³ in 1.2 ms on an H200, about 916 TOPS).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sdcscan.costmodel.counting import Tally


@dataclass(frozen=True)
class DeviceRates:
    """What one device class does per second, and what a launch and a host wait cost it.

    Attributes:
        bytes_per_s: device memory, bytes read plus written per second.
        matrix_flops_per_s: matrix products by operand dtype (FLOPs or integer ops per second), and other
            counted work (a quantized EmbeddingBag's lookups) where it was measured; a kind "base/variant"
            not listed runs at base's rate, anything else not listed at `other_flops_per_s`.
        op_bytes_per_s: operators measured below `bytes_per_s` (kernels bound by their instructions, not
            by memory): their bytes at this rate.
        kernel_s: the least time a kernel takes (launch and tail), so a tiny kernel is never free.
        wait_s: what one host wait costs the device: the queue drains, then the next launch reaches it.
        host_bytes_per_s: one host thread's tensor work (bytes read plus written per second).
        to_device_bytes_per_s: a copy from pageable host memory to the device.
    """

    name: str
    bytes_per_s: float
    matrix_flops_per_s: Mapping[str, float]
    other_flops_per_s: float
    op_bytes_per_s: Mapping[str, float] = field(default_factory=dict)
    kernel_s: float = 4e-6
    wait_s: float = 30e-6
    host_bytes_per_s: float = 4e9
    to_device_bytes_per_s: float = 10e9


# Measured on an H200 (torch 2.11.0+cu130, 2026-11-29, README "On a GPU"), and taken for the H100 too
# (the same GH100 chip; not measured there):
# - `_int_mm` at m = k = 8192, 8 more than a multiple of 16 wide (8,200, 4,104, 16,392): 290-301 TOPS
#   (scripts/bench_int_mm_width.py), where 8,192 or 8,224 wide take 915-923; taken for an inner dimension
#   8 more than a multiple of 16 too (gemm_int8's products at k = 8,200: 2.83 ms each, about 390 TOPS).
# - torch's CUDA quantized EmbeddingBag, the doctor profile's batches (200,000 bags of 260-340 lookups in a
#   table of 4 million rows of 64): 77.8 ms a batch 8-bit, 50.0 ms 4-bit (scripts/profile_case.py), about
#   60 million lookups each: a gather kernel far below the memory's rate.
# - the fused check kernels (scripts/check_fused.py): int8_block_partials read a 65,536 x 8,200 int32 block
#   in 2.886 ms (745 GB/s; 666 GB/s at 4,104 wide), embbag_exact_partials a 200,000 x 64 fp32 output in
#   0.167 ms (306 GB/s), far below the memory's rate. The int8 kernel's tile then held 255 registers a
#   thread with a spill, so an SM kept 8 warps; its new tile (int8_block.py) is not yet timed.
# The fingerprint's kernel (keyed_partials, sdcscan/checks/keyed_sums.py) is not yet timed either:
# it is counted at the memory's rate. That is an estimate: a word costs it four 64-bit products and
# splitmix64's shifts and xors, about 30 instructions, and 132 SMs issuing 128 lanes an instruction at
# 1.98 GHz get through about 1.1e12 words a second, twice the 0.54e12 that 4.3 TB/s delivers.
# gemm_fp's block check (fp_tile_partials, sdcscan/checks/tile_verdicts.py), not yet timed, is counted at
# the memory's rate too, which is optimistic: besides the fingerprint's work on each word it sums each
# output twice and compares 16 checksums per 64 outputs in float64, and at 134 registers a thread (sm_90)
# an SM keeps 12 of its warps.
MEASURED_ON_H200 = {
    "matrix": {"int8/unaligned": 296e12, "lookups/8bit": 0.771e9, "lookups/4bit": 1.20e9},
    "ops": {"int8_block_partials": 745e9, "embbag_exact_partials": 306e9},
}
# NVIDIA's H100 SXM5 datasheet, dense: fp64 and fp32 67 TFLOP/s, TF32 495 (sdcscan allows it in
# matmul_golden's TF32 slot only), bf16 and fp16 989, int8 1979 TOPS; HBM3 3.35 TB/s. Matrix rates are scaled by 0.8, what the H200's bf16 GEMM
# reached of the same datasheet figure (788 / 989), and bandwidth by 0.9 (4.3 of 4.8 TB/s on the H200).
H100 = DeviceRates(
    name="h100",
    bytes_per_s=0.9 * 3.35e12,
    matrix_flops_per_s={
        "float64": 0.8 * 67e12,
        "float32": 0.8 * 67e12,
        "float32/tf32": 0.8 * 495e12,
        "bfloat16": 0.8 * 989e12,
        "float16": 0.8 * 989e12,
        "int8": 916e12,  # measured on the H200, whose int8 rate is the H100's
        **MEASURED_ON_H200["matrix"],
    },
    other_flops_per_s=0.8 * 67e12,
    op_bytes_per_s=MEASURED_ON_H200["ops"],
)
# The H200: the H100's arithmetic, 4.8 TB/s of HBM3e (measured 4.3 TB/s copying).
H200 = DeviceRates(
    name="h200",
    bytes_per_s=4.3e12,
    matrix_flops_per_s={**H100.matrix_flops_per_s, "bfloat16": 788e12, "float16": 788e12},
    other_flops_per_s=H100.other_flops_per_s,
    op_bytes_per_s=MEASURED_ON_H200["ops"],
)
# One core of the 2-vCPU Intel Xeon (AVX-512, AMX bf16 and int8) this model was built on, torch 2.13.0+cpu
# on one thread, measured (best of 3-5): a 256 MB clone 6.0 GB/s read plus written; 1024^3 matmuls at 194
# (fp32), 105 (fp64), 1,640 (bf16, AMX) GFLOP/s, 512^3 fp16 at 214; `_int_mm` u8 x s8 1024^3 at 819 GOPS;
# an eager elementwise op on 8 values 1.8 us. A CPU answers a read at once: no wait is a drain.
XEON_AMX_CORE = DeviceRates(
    name="xeon-amx-core",
    bytes_per_s=6.0e9,
    matrix_flops_per_s={
        "float32": 194e9,
        "float64": 105e9,
        "bfloat16": 1640e9,
        "float16": 214e9,
        "int8": 819e9,
    },
    other_flops_per_s=105e9,
    kernel_s=1.8e-6,
    wait_s=0.0,
)


def _cpu_core(name: str, flops: Mapping[str, float]) -> DeviceRates:
    """One core's matrix rates, by dtype; memory, launch cost and waits as the Xeon's (a CPU answers a
    read at once), other work at its fp64 rate."""
    return DeviceRates(
        name=name,
        bytes_per_s=XEON_AMX_CORE.bytes_per_s,
        matrix_flops_per_s=dict(flops),
        other_flops_per_s=flops["float64"],
        kernel_s=XEON_AMX_CORE.kernel_s,
        wait_s=0.0,
    )


def _fp8_without_amx(fp32_flops_per_s: float) -> dict[str, float]:
    """fp8 rates of a CPU without AMX, from its fp32 rate. There torch's `_scaled_mm` converts both
    operands to fp32 and multiplies in fp32 (torch 2.13 calls oneDNN only where the CPU has AMX-INT8,
    or AMX-FP16 for two fp8 types; the profile shows the copies and the fp32 product): on the 2-vCPU
    AVX-512-BF16 EPYC, one thread, 256x1024x256, e4m3 ran at 0.28-0.45 of fp32's rate and e5m2 at
    0.55-0.59, the same with `ATEN_CPU_CAPABILITY=avx2`. A quarter of fp32 is taken for both slots."""
    return {"float8_e4m3fn": 0.25 * fp32_flops_per_s, "float8_e5m2": 0.25 * fp32_flops_per_s}


# The same core with oneDNN held below AMX (`ONEDNN_MAX_CPU_ISA`), 128x4096x256 products and `_int_mm` at
# 64x8192x1024 (best of 3, `torch.set_num_threads(1)`): AVX512_CORE (no bf16 units) bf16 36 GFLOP/s,
# AVX512_CORE_BF16 104; fp16 1.0 in both (emulated); fp32 and fp64 as with AMX. fp8 as a CPU of the
# class without AMX runs it (`_fp8_without_amx`).
XEON_AVX512_CORE = _cpu_core(
    "xeon-avx512-core",
    {
        "float32": 168e9,
        "float64": 91e9,
        "bfloat16": 36e9,
        "float16": 1.0e9,
        "int8": 207e9,
        **_fp8_without_amx(168e9),
    },
)
# fp8: torch's CPU `_scaled_mm` (matmul_golden's fp8 slots) on a 2-vCPU AVX-512-BF16 AMD EPYC, one thread,
# torch 2.13.0, 256x1024x256: 29-55 GFLOP/s (e4m3 x e4m3 the slower), the lower taken for both slots.
XEON_AVX512_BF16_CORE = _cpu_core(
    "xeon-avx512-bf16-core",
    {
        **XEON_AVX512_CORE.matrix_flops_per_s,
        "bfloat16": 104e9,
        "int8": 409e9,
        "float8_e4m3fn": 29e9,
        "float8_e5m2": 29e9,
    },
)
# The same core emulating AVX2 (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`), as above: bf16 0.74
# GFLOP/s, fp16 0.90, `_int_mm` 39 GOPS; fp32 181 and fp64 96 (MKL still uses AVX-512). Not an AVX2 CPU:
AVX2_EMULATED_CORE = _cpu_core(
    "xeon-avx2-emulated",
    {
        "float32": 181e9,
        "float64": 96e9,
        "bfloat16": 0.74e9,
        "float16": 0.90e9,
        "int8": 39e9,
        **_fp8_without_amx(181e9),
    },
)
# A real AVX2 CPU (2-vCPU AMD EPYC, no AVX-512, torch 2.13.0+cpu), from the case times issue 43 reports:
# burnin's gemm_fp bf16 case (64 products of 128x4096x256, 17.2 GFLOP) about 50 s, its fp32 case (32 of
# 512x4096x512, 68.7 GFLOP) 2.3 s, its first gemm_int8 case (1e11 ops) "at about 1 GOP/s". fp16 is taken
# as bf16 (both emulated), fp64 as half fp32, fp8 from fp32 (`_fp8_without_amx`), memory as the Xeon's:
# assumptions, not measurements.
EPYC_AVX2_CORE = _cpu_core(
    "epyc-avx2-core",
    {
        "float32": 30e9,
        "float64": 15e9,
        "bfloat16": 0.34e9,
        "float16": 0.34e9,
        "int8": 1.0e9,
        **_fp8_without_amx(30e9),
    },
)
DEVICES = {
    rates.name: rates
    for rates in (
        H100,
        H200,
        XEON_AMX_CORE,
        XEON_AVX512_BF16_CORE,
        XEON_AVX512_CORE,
        AVX2_EMULATED_CORE,
        EPYC_AVX2_CORE,
    )
}
GPUS = {rates.name: rates for rates in (H100, H200)}  # what the GPU budgets are held on
# The CPU rates known for each unit class (`units.CPU_CLASSES`): a profile's cases are held to its case
# times at each (sdcscan/costmodel/budgets.py). No baseline CPU has been measured.
CPU_CLASS_RATES = {
    "amx": (XEON_AMX_CORE,),
    "avx512-bf16": (XEON_AVX512_BF16_CORE,),
    "avx512": (XEON_AVX512_CORE,),
    "avx2": (AVX2_EMULATED_CORE, EPYC_AVX2_CORE),
}


@dataclass(frozen=True)
class PhaseTime:
    """Predicted seconds of one phase: the device's kernels, the host's waits and its own work."""

    kernels_s: float
    waits_s: float
    host_s: float

    @property
    def total_s(self) -> float:
        return self.kernels_s + self.waits_s + self.host_s


def predict(tally: Tally, rates: DeviceRates) -> PhaseTime:
    """Seconds a phase takes on `rates`' device: each kernel the longer of its bytes and its FLOPs (at
    least `kernel_s`), each host wait `wait_s`, the host's tensor work and copies at one thread's rate."""
    kernels = 0.0
    for k in tally.kernels:
        work_s = k.flops / _work_rate(rates, k.flop_dtype) if k.flops else 0.0
        bytes_s = (k.read + k.written) / rates.op_bytes_per_s.get(k.op, rates.bytes_per_s)
        kernels += max(rates.kernel_s, bytes_s, work_s)
    host = tally.host_bytes / rates.host_bytes_per_s + tally.to_device_bytes / rates.to_device_bytes_per_s
    return PhaseTime(kernels, tally.host_waits * rates.wait_s, host)


def _work_rate(rates: DeviceRates, kind: str) -> float:
    """Per second, of a kernel's counted work of this kind (DeviceRates.matrix_flops_per_s)."""
    table = rates.matrix_flops_per_s
    return table.get(kind) or table.get(kind.partition("/")[0]) or rates.other_flops_per_s
