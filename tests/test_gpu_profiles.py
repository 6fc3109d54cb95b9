"""GPU sizing of the built-in profiles (issue 10, item 4): on an H100 every workload entry runs cases of
0.1–2 s that load the GPU, within its memory, with its parameters accepted by the workload itself.

No GPU is needed: a case's work follows from its parameters (flop, or bytes moved for the memory-bound
EmbeddingBag), and a nominal H100 rate turns it into seconds at efficiencies 0.5 and 1.0 of the peak.
Work drawn on the host per case (random values from torch's CPU generator) counts against the upper
bound, since the GPU waits for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from sdcscan.profile import WorkloadEntry, builtin_profile_names, load_profile
from sdcscan.workloads import SPECS, base, load

# NVIDIA H100 SXM5 datasheet, dense (no sparsity). fp32 GEMMs without TF32 (the worker disables it) run
# on the CUDA cores at 67 TFLOP/s; fp64 on the tensor cores at 67; matmul_golden's TF32 slot at 495.
PEAK_OPS_PER_S = {
    "float64": 67e12,
    "float32": 67e12,
    "tfloat32": 495e12,
    "bfloat16": 989e12,
    "float16": 989e12,
    "int8": 1979e12,
}
HBM_BYTES_PER_S = 3.35e12  # HBM3
EFFICIENCIES = (0.5, 1.0)  # of the peak: what a case may reach, from a poor kernel to a perfect one
CASE_S = (0.1, 2.0)
# One core of torch's CPU generator: 1.35-1.6e8 values/s (rand, randn, randint; measured on an AMD EPYC).
HOST_VALUES_PER_S = 1.5e8
HOST_VALUES_MAX = 1.5e8  # per case: about a second of the host's time
GPU_MEMORY_MAX_BYTES = 60e9  # one worker per H100 80GB, with room for the allocator and the context
SECTOR_BYTES = 32  # HBM moves 32-byte sectors: a random row costs the sectors it touches

_BYTES = {"float64": 8, "float32": 4, "tfloat32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Projection:
    """A workload's cases on one H100: device seconds at the peak per kind of case, host values drawn per
    case, and GPU memory of one worker (pools, tables, a case's operands and outputs)."""

    device_s: Mapping[str, float]  # case kind (a dtype, shape or bit width) -> seconds at efficiency 1.0
    host_values: float
    memory_bytes: float


def _fingerprint_keys(out_bytes: float) -> float:
    """checks.digest.Fingerprint's key vector for an output: 8 bytes per word, rounded up to a power of 2."""
    return 8.0 * 2 ** math.ceil(math.log2(max(out_bytes / 8, 1)))


def _matmul_golden(p: Mapping[str, Any]) -> Projection:
    m, k, n = p["m"], p["k"], p["n"]
    flop = 2.0 * m * k * n
    device = {d: flop * r / PEAK_OPS_PER_S[d] for d, r in zip(p["dtypes"], p["repeats"], strict=True)}
    es = max(_BYTES[d] for d in p["dtypes"])
    elements = m * k + k * n + m * n
    # fp32 pool, the case's permuted fp32 copies (two passes) and its dtype copies; outputs: a block of
    # them (checked together), the expected one and a comparison, the digest's keys; the tally's
    # per-repeat buffers (bad elements per row, 8 rows kept)
    block = min(max(p["repeats"]), max(1, base.CHECK_BLOCK_BYTES["cuda"] // (m * n * es))) * m * n * es
    memory = 12 * elements + es * elements + block + m * n * (2 * es + 1) + _fingerprint_keys(block)
    memory += max(p["repeats"]) * (8 * m + 8 * n * es + 64)
    return Projection(device, host_values=2 * (m + n) + k, memory_bytes=memory)


def _gemm_fp(p: Mapping[str, Any]) -> Projection:
    device, host, memory = {}, 0.0, 0.0
    for dtype, (m, k, n), repeats, checker in zip(
        p["dtypes"], p["shapes"], p["repeats"], p["checkers"], strict=True
    ):
        device[f"{dtype} {m}x{k}x{n}"] = 2.0 * m * k * n * repeats / PEAK_OPS_PER_S[dtype]
        host = max(host, m + k + n)  # the case's three permutations of the device-side operand pool
        es, ck = _BYTES[dtype], _BYTES[checker]
        block = min(repeats, max(1, base.CHECK_BLOCK_BYTES["cuda"] // (m * n * es))) * m * n  # outputs
        operands = (m * k + k * n) * (2 * es + ck)  # the pool, the case's permuted copy, checker copies
        case = operands + block * (es + ck) + m * n * (2 * es + 2 * ck) + _fingerprint_keys(block * es)
        memory = max(memory, case)
    return Projection(device, host_values=host, memory_bytes=memory)


def _gemm_int8(p: Mapping[str, Any]) -> Projection:
    device, memory = {}, 0.0
    for m, k, n in p["shapes"]:
        gemm = 2.0 * m * k * n
        repeats = max(1, math.ceil(p["ops_per_case"] / gemm))  # as gemm_int8 decides
        device[f"{m}x{k}x{n}"] = gemm * repeats / PEAK_OPS_PER_S["int8"]
        n_ext = n + 16  # checksum rows, rounded up to a multiple of 8
        # signed copies of A and W_ext; the int32 output; the check's fp64 copy and int64 sums; the
        # digest's keys
        case = m * k + n_ext * k + 4 * m * n_ext + 16 * m * n + _fingerprint_keys(4 * m * n_ext)
        memory = max(memory, case)
    pools = max(m * k for m, k, _ in p["shapes"]) + 2**20 + sum(2 * (n + 16) * k for _, k, n in p["shapes"])
    return Projection(device, host_values=0, memory_bytes=pools + memory)


def _embbag_row_bytes(bits: int, dim: int) -> int:
    return dim + 8 if bits == 8 else dim // 2 + 4  # q bytes, then the scale and bias


def _embbag_int8(p: Mapping[str, Any]) -> Projection:
    """EmbeddingBag is judged on bytes: it does no arithmetic to speak of, and a case's time is its
    random row reads. Each lookup reads the sectors its row touches and its id; each bag reads two
    prefix sums of the exact check (checks/embbag/id_pool.py) and its bounds, and its output is written once and
    read or written by the exact check (about 11 passes: the scale, two conversions, the row sums, the
    round trip, its min/max) and the digest (3). A case is `repeats` batches of `bags` bags: the time
    follows bags·repeats, the id pool, its prefix sums and a batch's outputs follow bags (one batch
    at a time)."""
    lo, hi = p["pooling"]
    bags = p["bags"] * p["repeats"]  # looked up per case
    lookups = bags * (lo + hi) / 2
    device = {}
    for bits in p["bits"]:
        row = SECTOR_BYTES * math.ceil(_embbag_row_bytes(bits, p["dim"]) / SECTOR_BYTES)
        moved = lookups * (row + 4) + bags * (15 * 4 * p["dim"] + 2 * SECTOR_BYTES + 20)
        device[f"{bits}-bit"] = moved / HBM_BYTES_PER_S
    widths = len(set(p["bits"]))
    tables = p["rows"] * sum(_embbag_row_bytes(b, p["dim"]) + 8 for b in set(p["bits"]))  # + row sums
    pool = p["bags"] * hi * (8 if p["weighted"] else 4)  # one batch's row ids (and weights) per worker
    prefixes = 4 * p["bags"] * hi * widths  # the exact check's prefix sums over the pool, per bit width
    out = 4.0 * p["bags"] * p["dim"]
    memory = tables + pool + prefixes + 5 * out + 20 * p["bags"] + _fingerprint_keys(out)  # out, 3 buffers
    return Projection(device, host_values=p["bags"], memory_bytes=memory)


def _train(p: Mapping[str, Any]) -> Projection:
    i, h, c = p["inputs"], p["hidden"], p["classes"]
    params = (i * h + h) + (h * h + h) + 2 * h + (h * c + c)  # Linear, Linear, LayerNorm, Linear
    flop = 6.0 * params * p["batch"] * p["steps"]  # the workload's own count: forward 2, backward 4
    es = _BYTES[p["dtype"]]
    samples = p["steps"] * p["batch"] * i
    # weights, gradients and AdamW's two moments; ~8 (batch, hidden) activations kept for backward
    memory = 4 * params * es + 8 * p["batch"] * h * es + samples * es
    # the weights and the samples are drawn on the device (train.case_generator): nothing on the host
    return Projection({p["dtype"]: flop / PEAK_OPS_PER_S[p["dtype"]]}, 0, memory)


MODELS: dict[str, Callable[[Mapping[str, Any]], Projection]] = {
    "matmul_golden": _matmul_golden,
    "gemm_fp": _gemm_fp,
    "gemm_int8": _gemm_int8,
    "embbag_int8": _embbag_int8,
    "train": _train,
}


def cuda_params(entry: WorkloadEntry) -> dict[str, Any]:
    """The parameters a CUDA unit runs the entry with: defaults < params < cuda_params."""
    return {**SPECS[entry.name].defaults, **entry.params_for("cuda")}


def sizing_problems(name: str, params: Mapping[str, Any]) -> list[str]:
    """What is wrong with a workload's GPU case size: too short, too long, host-bound or too large."""
    if name not in MODELS:
        return [f"no H100 model for workload {name!r}: add one to tests/test_gpu_profiles.py"]
    proj = MODELS[name](params)
    host_s = proj.host_values / HOST_VALUES_PER_S
    problems = []
    for kind, peak_s in proj.device_s.items():
        for eff in EFFICIENCIES:
            device_s = peak_s / eff
            if CASE_S[0] <= device_s and host_s + device_s <= CASE_S[1]:
                continue
            if device_s < CASE_S[0]:
                problems.append(f"{kind}: {device_s:.3g} s of GPU work at efficiency {eff}")
            else:
                problems.append(f"{kind}: {host_s:.2g} + {device_s:.3g} s at efficiency {eff}")
    if proj.host_values > HOST_VALUES_MAX:
        problems.append(f"{proj.host_values:.3g} values drawn on the host per case")
    if proj.memory_bytes > GPU_MEMORY_MAX_BYTES:
        problems.append(f"{proj.memory_bytes / 1e9:.1f} GB of GPU memory")
    return problems


ENTRIES = [
    (profile, entry) for profile in builtin_profile_names() for entry in load_profile(profile).workloads
]


@pytest.mark.parametrize(("profile", "entry"), ENTRIES, ids=[f"{p}-{e.name}" for p, e in ENTRIES])
def test_every_workload_entry_has_gpu_sized_cuda_params(profile, entry):
    """cuda_params exist, the workload accepts them, and the cases they make fit an H100."""
    assert entry.cuda_params, f"{profile}: {entry.name} has no cuda_params"
    params = cuda_params(entry)
    spec = SPECS[entry.name]
    assert [k for k, v in params.items() if spec.param_problem(k, v)] == []
    assert spec.rules_problem(params) is None
    load(entry.name)(params)  # the constructor refuses shapes the workload cannot run (ValueError)
    assert sizing_problems(entry.name, params) == []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_cpu_defaults_are_far_too_small_for_a_gpu(name):
    """The sizing check fails where cuda_params are missing: the CPU-sized defaults last milliseconds."""
    problems = sizing_problems(name, SPECS[name].defaults)
    assert problems and "GPU work" in problems[0], problems


@pytest.mark.parametrize(
    ("name", "overrides", "needle"),
    [
        ("matmul_golden", {"m": 8192, "k": 8192, "n": 8192, "repeats": [300, 30, 450, 450]}, "float32"),
        ("gemm_int8", {"shapes": [[8192, 8192, 8192]], "ops_per_case": 1e16}, "8192x8192x8192"),
        ("embbag_int8", {"dim": 4, "bags": 200_000_000, "pooling": [1, 1]}, "host"),  # bag lengths
        ("embbag_int8", {"rows": 400_000_000, "dim": 64, "bags": 10_000_000, "pooling": [260, 340]}, "GB"),
        ("embbag_int8", {"dim": 64, "bags": 1_000_000, "repeats": 200, "pooling": [260, 340]}, "8-bit"),
    ],
)
def test_the_sizing_check_refuses_cases_too_long_host_bound_or_too_large(name, overrides, needle):
    """Each upper bound fires: over 2 s a case, over ~1 s of host draws, over 60 GB of GPU memory."""
    problems = sizing_problems(name, {**SPECS[name].defaults, **overrides})
    assert any(needle in p for p in problems), problems


def test_a_workload_without_a_model_is_reported_not_skipped():
    assert sizing_problems("collective", SPECS["collective"].defaults) == [
        "no H100 model for workload 'collective': add one to tests/test_gpu_profiles.py"
    ]
