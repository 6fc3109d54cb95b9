"""A fake ABFT workload for the self-test's tests: its check can be silenced, made to see the negative
control, or made to fire on clean data, so each judgement of a self-test result is shown both ways."""

from __future__ import annotations

from typing import Any, ClassVar

from sdcscan.outcomes import INVARIANT, STATUS_MISMATCH, STATUS_OK, Case, Outcome
from sdcscan.workloads.base import Context
from sdcscan.workloads.workload_spec import Quality, WorkloadSpec


class FakeAbft:
    """A minimal ABFT-protocol workload whose behaviour each test sets through class attributes."""

    name: ClassVar[str] = "fake_abft"
    spec: ClassVar[WorkloadSpec] = WorkloadSpec(
        name="fake_abft",
        description="a fake ABFT workload",
        evidence=(INVARIANT,),
        quality=Quality.BETA,
        defaults={"size": 4},
        fault_sites=("output", "input"),
    )
    negative_sites: ClassVar[tuple[str, ...]] = ("input",)
    selftest_variants: ClassVar[dict[str, dict[str, Any]]] = {"only": {}}
    blind_spots: ClassVar[tuple[str, ...]] = ("a flip of the input before the output is computed",)
    detects = True
    sees_input = False
    clean_fires = False

    def __init__(self, params: dict[str, Any]) -> None:
        self.p = params

    @classmethod
    def for_selftest(cls, params: dict[str, Any]) -> FakeAbft:
        return cls(params)

    def prepare(self, ctx: Context) -> None:
        pass

    def run(self, ctx: Context, case: Case) -> Outcome:
        import torch

        x = ctx.fault("input", torch.ones(self.p["size"]))
        y = ctx.fault("output", x * 2)
        fired = (self.detects and not torch.equal(y, x * 2)) or (
            self.sees_input and not torch.equal(x, torch.ones(4))
        )
        fired = fired or self.clean_fires
        return Outcome(status=STATUS_MISMATCH if fired else STATUS_OK, digest="0")

    @classmethod
    def selftest_bits(cls, variant: str, site: str) -> list[int | str]:
        return [30, "any"] if site == "output" else [31]

    @classmethod
    def selftest_floor(cls, variant: str, site: str, bit: int | str) -> float | None:
        return 1.0 if bit == 30 else None
