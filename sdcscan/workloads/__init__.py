"""The workload catalogue: what each workload is, its parameters and their defaults, without importing torch.

The parent process (profile validation, `sdcscan workloads`) reads only this module; the worker calls
`load(name)`, which imports `sdcscan/workloads/<name>.py` and returns the class it registered. Adding a
workload is its module, its `WorkloadSpec` entry in `SPECS` below (with a `Param` for every parameter:
what values its module accepts and which break it), and its row in README's table.

The limits below restate what the workload modules (and sdcscan.checks) enforce or need, because those
modules import torch; tests/test_catalogue.py checks each restated constant against its source.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdcscan.errors import UsageError
from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT
from sdcscan.workloads.params import (
    CalibrationPath,
    Choice,
    Flag,
    Int,
    ListOf,
    Number,
    Param,
    Shape,
    one_per_dtype,
    shown,
)

if TYPE_CHECKING:
    from sdcscan.workloads.base import Workload


# Rule: a check of the merged parameters (defaults < profile < command line) that no single one decides;
# it returns (key, problem) or None.
Rule = Callable[[Mapping[str, Any]], tuple[str, str] | None]


class Quality(enum.Enum):
    BETA = "beta"  # every workload on arrival
    PROD = "prod"  # after a clean soak


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload is, as the parent process and the documentation need it (no torch).

    Attributes:
        name: stable id, lower_snake, never renamed once merged; also the module's name.
        description: one line, shown by `sdcscan workloads`.
        evidence: the kinds of evidence it supports, a subset of outcomes.EVIDENCE.
        quality: BETA or PROD.
        defaults: every parameter and its default; a profile may set these keys only.
        fault_sites: sites the workload passes through `ctx.fault`; the first is the one `--inject` uses.
        tiny: parameter overrides that make a case take milliseconds (tests, CI).
        params: every parameter's accepted values (the same keys as `defaults`).
        rules: checks across parameters, run on the merged parameters a unit will get.
        distributed: it runs collectives with its peers (`Context.world`): only in a distributed
            run, every rank at the same case at once, never re-run alone.
        data_version: raised whenever the same case starts computing other data or digesting it
            another way (other digests): it changes the plan's hash, so goldens recorded before do
            not apply.
    """

    name: str
    description: str
    evidence: tuple[str, ...]
    quality: Quality
    defaults: Mapping[str, Any]
    fault_sites: tuple[str, ...]
    tiny: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Param] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    distributed: bool = False
    data_version: int = 1

    def param_problem(self, key: str, value: Any) -> str | None:
        """What is wrong with `value` for parameter `key` (None: accepted); `key` must be in `params`."""
        return self.params[key].problem(value)

    def rules_problem(self, merged: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key, problem) from the first rule the merged parameters break, or None."""
        for rule in self.rules:
            found = rule(merged)
            if found:
                return found
        return None


# Restated limits (see the module docstring); each names where it comes from.
TRAIN_DTYPES = ("float32", "float64", "bfloat16")  # train._DTYPES
GOLDEN_DTYPES = ("float32", "float64", "bfloat16", "float16")  # matmul_golden.DTYPES
GOLDEN_EXACT_LIMIT = 2**24  # matmul_golden: k * max_abs^2 below it keeps every fp32 partial sum exact
INT8_SCHEMES = ("mod2_32", "mod127")  # checks.int8.SCHEMES
INT8_PATHS = ("auto", "unsigned", "signed")  # gemm_int8.PATHS
INT8_MIN_K = 2  # gemm_int8.MIN_K: k = 1 returned uninitialised memory from torch's CPU _int_mm
INT8_MAX_K = 65_793  # checks.int8.max_exact_k(): beyond it a u8·s8 dot product overflows int32
INT8_MAX_N_MOD2_32 = 64_770  # checks.int8.MAX_N_MOD2_32: column sums must fit three checksum digits
INT8_MAX_N = 91_778  # checks.int8: the position-weighted checksum rows must fit their digits
INT8_MAX_M = 2**22 - 1  # checks.int8: the column check's activation sums must fit their digit rows
EMBBAG_MODES = ("exact", "realistic")  # embbag_int8.MODES
EMBBAG_MAX_POOLING = 21_845  # embbag_int8: pooling[1] * 3 < 2^16
EMBBAG_BITS = (8, 4)  # checks.embbag.BITS: 8-bit rows (fp32 scale, bias) and 4-bit rows (fp16 scale, bias)
EMBBAG_4BIT_DIM_MULTIPLE = 8  # embbag_int8: torch's CUDA 4-bit kernel needs D % 8 == 0 (CPU: D even)
FP_DTYPES = ("float32", "float64", "bfloat16", "float16")  # calibration.DTYPES
# calibration.DISTRIBUTIONS
FP_INPUTS = ("abs_normal", "normal", "shifted_normal", "uniform", "student_t3", "llm_like", "row_scales")
FP_CHECKERS = ("float32", "float64")  # a float16 checksum overflows (inf: every row fails on clean data)
FP_CALIBRATED_C = 2.5  # checks.vabft.SIGMA_C: e_max is measured at this c; a smaller c flags clean rows

_DIGITS = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}  # significand bits


GOLDEN_REFERENCES = ("direct", "kronecker")  # matmul_golden.REFERENCES
# matmul_golden's `kronecker` pool: the larger of its two small int64 products may cost this many
# multiply-adds (about 0.1 s on one core); 8192 x 8192 x 8192 needs 128^3, about 2 million.
GOLDEN_KRONECKER_MAX_OPS = 2**30


def golden_kronecker_split(m: int, k: int, n: int) -> tuple[tuple[int, int], ...]:
    """How matmul_golden's `kronecker` reference factors its shape: ((m1, m2), (k1, k2), (n1, n2)).

    Each dimension d is d1·d2 with d1 its largest divisor at most √d, so the pool's A = A1 ⊗ A2 (A1 is
    (m1, k1), A2 (m2, k2)) and B = B1 ⊗ B2 have the exact product (A1·B1) ⊗ (A2·B2), which costs
    m1·k1·n1 + m2·k2·n2 multiply-adds instead of m·k·n. Torch-free: the catalogue's rule uses it too.

    Raises:
        ValueError: the larger small product would cost more than GOLDEN_KRONECKER_MAX_OPS (a dimension
            that is prime, or nearly so, leaves its whole length in one factor).
    """
    split = tuple(_near_root_split(d) for d in (m, k, n))
    (m1, m2), (k1, k2), (n1, n2) = split
    if max(m1 * k1 * n1, m2 * k2 * n2) > GOLDEN_KRONECKER_MAX_OPS:
        raise ValueError(
            f"the kronecker reference needs m, k and n with divisors near their square roots; {m} x {k} x "
            f"{n} leaves a {m2} x {k2} x {n2} product, more than 2^30 multiply-adds (use sizes such as "
            "powers of two, or reference: direct)"
        )
    return split


def _near_root_split(d: int) -> tuple[int, int]:
    small = next(f for f in range(math.isqrt(d), 0, -1) if d % f == 0)
    return small, d // small


def _golden_rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    if p["k"] * p["max_abs"] ** 2 >= GOLDEN_EXACT_LIMIT:
        k, top = p["k"], p["max_abs"]
        return "k", f"k * max_abs^2 must be below 2^24 for exact fp32 partial sums (got {k} * {top}^2)"
    if p["reference"] == "kronecker":
        try:
            golden_kronecker_split(p["m"], p["k"], p["n"])
        except ValueError as err:
            return "reference", str(err)
    return one_per_dtype(p, ("repeats",))


def _int8_rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    for i, (m, _, n) in enumerate(p["shapes"]):
        if n > INT8_MAX_N or m > INT8_MAX_M:
            return "shapes", f"item [{i}] needs n <= {INT8_MAX_N} and m <= {INT8_MAX_M} (got m={m}, n={n})"
    if p["scheme"] == "mod2_32":
        for i, (_, _, n) in enumerate(p["shapes"]):
            if n > INT8_MAX_N_MOD2_32:
                return (
                    "shapes",
                    f"item [{i}] n must be at most {INT8_MAX_N_MOD2_32} with scheme mod2_32 (got {n})",
                )
    return None


def _embbag_rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    low, high = p["pooling"]
    if high < 1 or low > high:
        return (
            "pooling",
            f"must be [min, max] lookups per bag with min <= max and max >= 1 (got [{low}, {high}])",
        )
    if 4 in p["bits"] and p["dim"] % EMBBAG_4BIT_DIM_MULTIPLE:
        return "dim", f"must be a multiple of {EMBBAG_4BIT_DIM_MULTIPLE} with 4-bit tables (got {p['dim']})"
    return None


def _train_rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    if p["autocast"] != "none" and p["dtype"] != "float32":  # train.Train refuses it too
        return "autocast", (
            f"needs dtype float32 (got {p['dtype']}): autocast lowers float32 matmuls to "
            f"{p['autocast']}; it never lowers float64, and bfloat16 weights are low precision already"
        )
    return None


def _fp_rules(p: Mapping[str, Any]) -> tuple[str, str] | None:
    found = one_per_dtype(p, ("shapes", "repeats", "checkers"))
    if found:
        return found
    for i, (dtype, checker) in enumerate(zip(p["dtypes"], p["checkers"], strict=True)):
        if _DIGITS[checker] < _DIGITS[dtype]:  # checksums coarser than the data they check
            return "checkers", f"item [{i}] must be at least as precise as its dtype {dtype} (got {checker})"
    return None


_CATALOGUE = (
    WorkloadSpec(
        name="train",
        description=(
            "deterministic tiny MLP training with AdamW; digest of every step's loss, final weights and "
            "optimizer state"
        ),
        evidence=(INVARIANT, CONSENSUS, REPEAT),
        quality=Quality.PROD,
        defaults={
            "inputs": 64,
            "hidden": 128,
            "classes": 10,
            "batch": 64,
            "steps": 60,
            "lr": 1e-3,
            "dtype": "float32",
            # "bfloat16"/"float16": forward and loss under torch.autocast, so matmuls run on the matrix
            # units at that precision while weights and AdamW's state stay float32
            "autocast": "none",
        },
        fault_sites=("weight",),  # hidden-layer weight, half way through the case
        data_version=2,  # 2: on a GPU a case's weights and data are drawn on the device (CPU data unchanged)
        tiny={"hidden": 16, "batch": 8, "steps": 6},
        params={
            "inputs": Int(1),  # 0: a Linear without inputs (its init divides by inputs)
            "hidden": Int(1),
            "classes": Int(2),  # 1: the loss is 0 and every gradient too, so backward checks nothing
            "batch": Int(1),  # 0: the loss of an empty batch is NaN, reported as a miscompute
            "steps": Int(1),
            # AdamW moves each weight by about lr per step; lr 1000 made the loss NaN (measured), and
            # a NaN loss is reported as a miscompute. lr <= 1 stayed finite for 3000 steps in every dtype.
            "lr": Number(0.0, 1.0, low_open=True),
            "dtype": Choice(TRAIN_DTYPES),
            "autocast": Choice(("none", "bfloat16", "float16")),  # train._AUTOCAST
        },
        rules=(_train_rules,),
    ),
    WorkloadSpec(
        name="train_dp",
        description=(
            "deterministic data-parallel MLP training with AdamW; every rank hashes its parameters and "
            "optimizer state, a wrong hash names its rank or its hop"
        ),
        evidence=(INVARIANT, CONSENSUS),
        quality=Quality.BETA,
        defaults={
            "width": 64,
            "depth": 3,
            "batch": 32,
            # 6 steps: 80-130 ms per case with 4 gloo ranks on 2 cores, most of it collective latency
            "steps": 6,
            "hash_every": 3,  # steps between exchanges of state hashes (and at the case's end)
            "lr": 1e-3,
            "dtype": "float32",
        },
        # a parameter right after the optimizer step; `--inject R:update` strikes there on rank R alone
        fault_sites=("update",),
        tiny={"width": 16, "depth": 1, "batch": 8, "steps": 4, "hash_every": 2},
        params={
            "width": Int(1),
            "depth": Int(1),
            "batch": Int(1),  # 0: the loss of an empty batch is NaN
            "steps": Int(1),
            "hash_every": Int(1),
            "lr": Number(0.0, 1.0, low_open=True),  # as train's
            "dtype": Choice(("float32", "bfloat16")),  # train_dp.DTYPES (its test checks them)
        },
        distributed=True,
    ),
    WorkloadSpec(
        name="matmul_golden",
        description=(
            "integer-valued matmuls in fp32/fp64/bf16/fp16 compared bit-exactly with an int64 reference"
        ),
        evidence=(INVARIANT, CONSENSUS, REPEAT),
        quality=Quality.PROD,
        defaults={
            "m": 256,
            "k": 1024,
            "n": 256,
            "max_abs": 8,
            "dtypes": ["float32", "float64", "bfloat16", "float16"],
            "repeats": [48, 16, 1, 1],  # per dtype, to give each case about 0.1-0.5 s of compute on one core
            # direct: random pool operands, their product by an int64 matmul on the CPU (m·k·n
            # multiply-adds: minutes at 8192^3); kronecker: Kronecker-structured ones whose exact
            # product is two small matmuls (GPU-sized shapes; golden_kronecker_split)
            "reference": "direct",
        },
        fault_sites=("output",),
        data_version=2,  # 2: repeats digested by device-side fingerprints (issue 10)
        tiny={"m": 16, "k": 64, "n": 16, "repeats": [2, 2, 1, 1]},
        params={
            "m": Int(1),
            "k": Int(1),
            "n": Int(1),
            "max_abs": Int(1),  # operands in [-max_abs, max_abs]; 0 would make them all zero
            "dtypes": ListOf(Choice(GOLDEN_DTYPES)),  # cases cycle through them: empty divides by 0
            "repeats": ListOf(Int(1)),  # per dtype; 0 repeats compute nothing to compare
            "reference": Choice(GOLDEN_REFERENCES),
        },
        rules=(_golden_rules,),
    ),
    WorkloadSpec(
        name="gemm_int8",
        description=(
            "u8×s8→s32 GEMMs (torch._int_mm) with exact ABFT row (mod 2^32 or 127), column and "
            "position-weighted row checksums"
        ),
        evidence=(INVARIANT, CONSENSUS),
        quality=Quality.BETA,
        defaults={
            "scheme": "mod2_32",
            # (m, k, n): DLRM MLP layers, batch rows m from 1 (inference) to 128
            "shapes": [
                [1, 3200, 800],
                [16, 512, 1024],
                [32, 2048, 1024],
                [64, 512, 512],
                [64, 1024, 1024],
                [128, 1024, 512],
            ],
            "ops_per_case": 2.0e8,  # GEMMs repeat (fresh activations) until 2mnk·repeats reaches this
            "path": "auto",
        },
        fault_sites=("output", "encoded", "operand"),
        # 2: operands from per-worker pools (issue 10), no longer drawn whole per case; 3: one pool view
        # per repeat, outputs digested by fingerprints
        data_version=3,
        tiny={"shapes": [[1, 64, 40], [20, 32, 24]], "ops_per_case": 1.0e5},
        params={
            "scheme": Choice(INT8_SCHEMES),
            "shapes": ListOf(Shape(k=Int(INT8_MIN_K, INT8_MAX_K))),
            "ops_per_case": Number(0.0, low_open=True, high=1e16),  # a GPU case: ~5e14 (an H100's second)
            "path": Choice(INT8_PATHS),
        },
        rules=(_int8_rules,),
    ),
    WorkloadSpec(
        name="embbag_int8",
        description=(
            "8- and 4-bit rowwise-quantized EmbeddingBag (FBGEMM) with per-bag checksums of the intended rows"
        ),
        evidence=(INVARIANT, CONSENSUS),
        quality=Quality.BETA,
        defaults={
            "mode": "exact",
            "rows": 1_000_000,  # scaled down when memory is short (see EmbbagInt8.prepare)
            "dim": 64,  # a multiple of 4: the CUDA kernel needs it
            "bags": 32768,
            # batches of `bags` bags per case, each at its own offset in the id pool: more lookups per
            # case without a larger pool (the pool holds one batch's ids)
            "repeats": 1,
            "pooling": [20, 100],  # lookups per bag, min and max
            "weighted": False,  # per-sample weights (small integers in exact mode)
            "bits": [8, 4],  # table bit width per case, cycled by case occurrence
        },
        # table: the quantized bytes of one row the case pools, restored after the case (the table is
        # shared by all cases). fetch: the hashed row ids the op reads, while the check uses the intended
        # ones (a wrong-row fetch). indices: raw sparse ids before `% rows`; both the lookup and the
        # checksum use the hashed id, so the check cannot see it (a negative control for the selftest).
        # Every site strikes batch 0 of a case (with `repeats` > 1).
        fault_sites=("output", "table", "fetch", "indices"),
        data_version=2,  # 2: row ids and weights from per-worker pools, outputs digested by fingerprints
        tiny={"rows": 2048, "dim": 16, "bags": 16, "pooling": [1, 8]},
        params={
            "mode": Choice(EMBBAG_MODES),
            "rows": Int(1),
            "dim": Int(4, multiple_of=4),
            "bags": Int(1),
            "repeats": Int(1),
            "pooling": ListOf(Int(0, EMBBAG_MAX_POOLING), length=2),  # max 0: every bag empty
            "weighted": Flag(),
            "bits": ListOf(Int(4, 8, multiple_of=4)),  # 8 or 4; cases cycle through them
        },
        rules=(_embbag_rules,),
    ),
    WorkloadSpec(
        name="gemm_fp",
        description=(
            "fp32/fp64/bf16/fp16 matmuls checked per row with V-ABFT thresholds; errors located to an element"
        ),
        evidence=(INVARIANT, CONSENSUS, REPEAT),
        quality=Quality.BETA,
        defaults={
            "dtypes": ["float32", "float64", "bfloat16", "float16"],
            # (m, k, n) per dtype: about 0.1-0.5 s per case on one AVX2 core (bf16/fp16 have no fast kernel there)
            "shapes": [[1024, 1024, 1024], [512, 1024, 512], [128, 1024, 256], [128, 1024, 256]],
            "repeats": [4, 4, 2, 2],
            "checkers": ["float32", "float64", "float32", "float32"],  # precision of the checksums per dtype
            "inputs": "abs_normal",  # calibration.DISTRIBUTIONS name; |N(0,1)|+0.5 (docs/abft.md §3.2)
            "c": 2.5,
            "calibration": "",  # path of a calibration table; "" = the one shipped with sdcscan
        },
        fault_sites=("output", "operand_b_encoded", "operand_a"),
        # 2: repeats digested by device-side fingerprints; 3: operands permuted from a per-worker pool
        data_version=3,
        tiny={"shapes": [[16, 64, 16]] * 4, "repeats": [1, 1, 1, 1]},
        params={
            "dtypes": ListOf(Choice(FP_DTYPES)),
            "shapes": ListOf(Shape()),
            "repeats": ListOf(Int(1)),  # 0 repeats compute no product to check
            "checkers": ListOf(Choice(FP_CHECKERS)),
            "inputs": Choice(FP_INPUTS),
            "c": Number(FP_CALIBRATED_C),
            "calibration": CalibrationPath(),
        },
        rules=(_fp_rules,),
    ),
    WorkloadSpec(
        name="collective",
        description=(
            "all_gather, all_reduce, reduce_scatter, broadcast and a send/recv ring on exact data, checked "
            "bit for bit on every rank; a wrong block names its hop, unexplained sums go to triage"
        ),
        evidence=(INVARIANT,),
        quality=Quality.BETA,
        defaults={
            "collectives": ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"],
            "dtypes": ["bfloat16", "float16", "float32", "int32"],
            # elements per block, cycled with the collectives and dtypes: 10-100 ms per case with 4 gloo
            # ranks on 2 cores; GPU profiles set KB to hundreds of MB in cuda_params
            "sizes": [4096, 65536, 262144],
            "triage_budget": 16,  # subgroup re-runs when no hop or rank explains a failure
        },
        # not a ctx.fault site: `--inject R:link` makes the hop into rank R corrupt what crosses it
        fault_sites=("link",),
        tiny={"sizes": [257]},
        params={
            # restated from collectives.COLLECTIVES, collective.DTYPES and collective.MAX_BLOCK (exact data
            # needs ~40 B of host memory per element); tests/test_workload_collective.py checks them
            "collectives": ListOf(
                Choice(("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"))
            ),
            "dtypes": ListOf(Choice(("bfloat16", "float16", "float32", "int32"))),
            "sizes": ListOf(Int(1, 2**27)),
            "triage_budget": Int(1, 1024),
        },
        distributed=True,
    ),
)
SPECS: dict[str, WorkloadSpec] = {s.name: s for s in _CATALOGUE}


def spec(name: str) -> WorkloadSpec:
    """The catalogue entry of workload `name`.

    Raises:
        UsageError: no workload has that name (the message suggests the closest one).
    """
    try:
        return SPECS[name]
    except KeyError:
        close = difflib.get_close_matches(name, SPECS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(SPECS))})"
        raise UsageError(f"unknown workload {shown(name)}{hint}") from None  # shown: it may come from a file


def load(name: str) -> type[Workload]:
    """The workload class called `name`, importing its module (and torch) on first use.

    Raises:
        UsageError: no workload has that name.
    """
    spec(name)
    from sdcscan.workloads.base import REGISTRY

    if name not in REGISTRY:
        importlib.import_module(f"{__name__}.{name}")
    return REGISTRY[name]
