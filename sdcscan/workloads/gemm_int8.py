"""`gemm_int8`: u8 × s8 → s32 GEMMs through `torch._int_mm`, each output row verified by exact ABFT checksums.

The weight is encoded once per case with checksum rows (sdcscan/checks/int8.py) and each int32 result
is checked row by row before anything else touches it, as in Li et al.'s DLRM int8 GEMM. The check is
integer arithmetic, so a failing row is a wrong product, never rounding. Shapes are DLRM-like and
include skinny ones (m = 1…64); a case cycles through them by occurrence.

Pre-VNNI int8 kernels may saturate u8·s8 pairs to int16 (docs/abft.md §1.2): `prepare`
probes exactness and, where the probe fails, restricts activations to [0, 127] and says so, so that
saturation is never reported as a hardware fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from sdcscan.checks import int8
from sdcscan.checks.digest import Digest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads.base import Context, register

MAX_RECORDED = 8  # bad rows recorded per case; the count is always complete
PATHS = ("auto", "unsigned", "signed")  # signed = the CUDA route (int8 only), runnable on CPU for tests
# torch 2.13's CPU `_int_mm` with a uint8 A and k = 1 returns uninitialised memory (seen on an AMD EPYC
# with AVX-512 VNNI; k >= 2 verified exact there for m 1..33, n 8..24): a one-term dot product is no
# test of anything, so such shapes are refused rather than worked around.
MIN_K = 2
_SMALL = [[8, 64, 40]]  # selftest shape: m = 8 rows make an all-zero activation column (a blind spot) ~2^-64


@register
class GemmInt8:
    name: ClassVar[str] = "gemm_int8"
    spec: ClassVar[WorkloadSpec] = SPECS[name]
    negative_sites: ClassVar[tuple[str, ...]] = ("operand",)  # A before the GEMM: product stays consistent
    selftest_variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "mod2_32": {"scheme": "mod2_32", "shapes": _SMALL, "ops_per_case": 1.0},
        "mod127": {"scheme": "mod127", "shapes": _SMALL, "ops_per_case": 1.0},
    }

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = p = {**self.spec.defaults, **params}
        int8.checksum_rows(p["scheme"])  # raises on an unknown scheme
        if p["path"] not in PATHS:
            raise ValueError(f"gemm_int8: path must be one of {', '.join(PATHS)}")
        for shape in p["shapes"]:
            if len(shape) != 3 or min(shape) < 1:
                raise ValueError(f"gemm_int8: each shape must be [m, k, n] of positive integers, got {shape}")
            if shape[1] < MIN_K:
                raise ValueError(f"gemm_int8: shape {shape}: k must be at least {MIN_K}")
            if shape[1] > int8.max_exact_k() or (p["scheme"] == "mod2_32" and shape[2] > int8.MAX_N_MOD2_32):
                raise ValueError(f"gemm_int8: shape {shape} overflows int32 or the checksum digits")
        self.a_max = 255
        self.signed = False

    @classmethod
    def for_selftest(cls, params: Mapping[str, Any]) -> GemmInt8:
        return cls(params)  # no shortcut: a trial is a few small GEMMs

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        """mod2_32 sees every flip in C and in W_ext; mod127 every single-bit flip in C only."""
        if site == "output" or (variant == "mod2_32" and site == "encoded"):
            return 1.0
        return None

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> Sequence[int | str]:
        return list(range(32 if site == "output" else 8))  # int32 output words, int8/uint8 operands

    def prepare(self, ctx: Context) -> None:
        self.signed = self.p["path"] == "signed" or (self.p["path"] == "auto" and ctx.device.type == "cuda")
        bad = _probe(self._mm, ctx.device)
        if bad:
            self.a_max = 127
            ctx.note(
                f"gemm_int8: torch._int_mm is not exact for full-range u8 activations on {ctx.device} "
                f"({bad}); likely int16 saturation in a pre-VNNI kernel, not a fault. "
                "Activations restricted to [0, 127]."
            )

    def run(self, ctx: Context, case: Case) -> Outcome:
        p = self.p
        m, k, n = p["shapes"][case.occurrence % len(p["shapes"])]
        repeats = max(1, math.ceil(p["ops_per_case"] / (2.0 * m * n * k)))
        with ctx.phase("setup"):
            g = ctx.generator(case.seed)
            w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).to(ctx.device)
            a = torch.randint(0, self.a_max + 1, (repeats, m, k), generator=g, dtype=torch.uint8)
            a = a.to(ctx.device)
            w_ext = ctx.fault("encoded", int8.encode_weight(w, p["scheme"]))
            ctx.fault("operand", a[0])  # negative control: A is not encoded, the product stays consistent
        digest, mismatches, bad_rows = Digest(), list[Mismatch](), 0
        for r in range(repeats):
            with ctx.phase("compute"):
                c = self._mm(a[r], w_ext)
            ctx.fault("output", c, repeat=r, repeats=repeats, columns=n)
            with ctx.phase("check"):
                check = int8.verify(c, n, p["scheme"])
                if bool(check.bad.any()):
                    bad_rows += int(check.bad.sum())
                    mismatches.extend(_mismatches(check, p["scheme"], r)[: MAX_RECORDED - len(mismatches)])
                digest.tensor(c)
        return Outcome(
            status=STATUS_MISMATCH if bad_rows else STATUS_OK,
            digest=digest.hexdigest(),
            mismatches=mismatches,
            ops=2.0 * m * n * k * repeats,
            ops_unit="op",
            detail={
                "scheme": p["scheme"],
                "shape": [m, k, n],
                "repeats": repeats,
                "activation_max": self.a_max,
                "path": "signed" if self.signed else "unsigned",
                "bad_rows": bad_rows,
            },
        )

    def _mm(self, a_u8: torch.Tensor, w_ext: torch.Tensor) -> torch.Tensor:
        """C = A_u8 @ W_ext.T in int32, through the native u8 path or the padded signed (CUDA) path."""
        if not self.signed:
            return torch._int_mm(a_u8, w_ext.t())
        plan = int8.plan_cuda(a_u8.shape[0], a_u8.shape[1], w_ext.shape[0])
        a_s8, w_s8 = int8.signed_operands(a_u8, w_ext, plan)
        c = torch._int_mm(a_s8, w_s8.t())[: a_u8.shape[0]]
        return c + int8.unsigned_correction(w_ext)  # exact: the same int32 words as the unsigned product


def _probe(mm: Any, device: torch.device) -> str:
    """Compare `mm` with an exact fp64 reference on full-range inputs; '' when exact, else what failed."""
    g = torch.Generator().manual_seed(0x1A7)
    shape = (32, 256)  # k = 256: 128 saturated u8·s8 pairs per dot product if the kernel saturates
    a_full = torch.full(shape, 255, dtype=torch.uint8)
    cases = {
        "A=255, W=127": (a_full, torch.full(shape, 127, dtype=torch.int8)),
        "A=255, W=-128": (a_full, torch.full(shape, -128, dtype=torch.int8)),
        "random": (
            torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
            torch.randint(-128, 128, shape, generator=g, dtype=torch.int8),
        ),
    }
    for label, (a, w) in cases.items():
        ref = (a.double() @ w.double().t()).to(torch.int32)  # exact: |C| < 2^23
        got = mm(a.to(device), w.to(device)).cpu()
        if not torch.equal(got, ref):
            return f"{label}: max error {int((got.long() - ref.long()).abs().max())}"
    return ""


def _mismatches(check: int8.RowCheck, scheme: str, repeat: int) -> list[Mismatch]:
    """One record per bad row: checksum side as expected, data side as actual, XOR of the two."""
    found = []
    for i in check.bad.nonzero().flatten()[:MAX_RECORDED].tolist():
        exp, act = int(check.checksum[i]), int(check.data_sum[i])
        where = f"row {i} of C (repeat {repeat})"
        if check.pad_nonzero[i]:
            where += ", padding column non-zero"
        found.append(Mismatch(f"abft_{scheme}", where, str(exp), str(act), f"{exp ^ act:#x}"))
    return found
