"""The workload catalogue: what each workload is, its parameters and their defaults, without importing torch.

The parent process (profile validation, `sdcscan workloads`) reads only this module; the worker calls
`load(name)`, which imports `sdcscan/workloads/<name>.py` and returns the class it registered. Adding a
workload is its module, its `WorkloadSpec` entry in `SPECS` below, and its row in README's table.
"""

from __future__ import annotations

import difflib
import enum
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdcscan.errors import UsageError
from sdcscan.outcomes import CONSENSUS, INVARIANT, REPEAT

if TYPE_CHECKING:
    from sdcscan.workloads.base import Workload


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
        defaults: every parameter and its default; a profile may set these keys only, to values of
            the same type.
        fault_sites: sites the workload passes through `ctx.fault`; the first is the one `--inject` uses.
        tiny: parameter overrides that make a case take milliseconds (tests, CI).
    """

    name: str
    description: str
    evidence: tuple[str, ...]
    quality: Quality
    defaults: Mapping[str, Any]
    fault_sites: tuple[str, ...]
    tiny: Mapping[str, Any] = field(default_factory=dict)


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
        },
        fault_sites=("weight",),  # hidden-layer weight, half way through the case
        tiny={"hidden": 16, "batch": 8, "steps": 6},
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
        },
        fault_sites=("output",),
        tiny={"m": 16, "k": 64, "n": 16, "repeats": [2, 2, 1, 1]},
    ),
    WorkloadSpec(
        name="gemm_int8",
        description="u8×s8→s32 GEMMs (torch._int_mm) with exact ABFT row checksums (mod 2^32 or 127)",
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
        tiny={"shapes": [[1, 64, 40], [20, 32, 24]], "ops_per_case": 1.0e5},
    ),
    WorkloadSpec(
        name="embbag_int8",
        description="8-bit rowwise-quantized EmbeddingBag (FBGEMM) with per-bag row-sum checksums",
        evidence=(INVARIANT, CONSENSUS),
        quality=Quality.BETA,
        defaults={
            "mode": "exact",
            "rows": 1_000_000,  # scaled down when memory is short (see EmbbagInt8.prepare)
            "dim": 64,  # a multiple of 4: the CUDA kernel needs it
            "bags": 32768,
            "pooling": [20, 100],  # lookups per bag, min and max
            "weighted": False,  # per-sample weights (small integers in exact mode)
        },
        # table: the D quantized bytes of one row the case pools, restored after the case (the table is
        # shared by all cases). indices: raw sparse ids before `% rows`; both the lookup and the checksum
        # use the hashed id, so the check cannot see it (a negative control for `sdcscan selftest`).
        fault_sites=("output", "table", "indices"),
        tiny={"rows": 2048, "dim": 16, "bags": 16, "pooling": [1, 8]},
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
        tiny={"shapes": [[16, 64, 16]] * 4, "repeats": [1, 1, 1, 1]},
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
        raise UsageError(f"unknown workload {name!r}{hint}") from None


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
