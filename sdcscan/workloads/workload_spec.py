"""What a workload is, as the parent process and the documentation need it: `WorkloadSpec` (no torch).

Each workload declares its `SPEC` in `sdcscan/workloads/<name>/spec.py`, beside its torch code
(`<name>/workload.py`); the catalogue (`sdcscan.workloads`) collects them. The spec also says what a
pass of the workload proves (`Coverage`, read by the judgement) and which plain operations its
efficiency is measured against (`PlainOp`, timed by `sdcscan.peaks`), so a workload is its package.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from sdcscan.proof import positive
from sdcscan.workloads.params import Param

# Rule: a check of the merged parameters (defaults < profile < command line) that no single one decides;
# it returns (key, problem) or None.
Rule = Callable[[Mapping[str, Any]], tuple[str, str] | None]
# Memory: the bytes one case must hold at least, from the merged parameters (its largest tensors).
Memory = Callable[[Mapping[str, Any]], int]
DTYPE_BYTES = {"float64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


Evidence = Literal["invariant", "digest"]


@dataclass(frozen=True)
class Coverage:
    """How one workload's throughput ops become checked ops, and the detection its checks are held to
    (`sdcscan.proof.rate_bound` turns them into a bound on the corruption rate a pass leaves room for).

    Attributes:
        op: what one checked op is, in words ("multiply-add").
        per_op: checked ops per op of the workload's throughput count (`Outcome.ops`, in its ops_unit).
        times: a key of the case's `detail` whose value multiplies that (embbag's `dim`), or None.
        evidence: "invariant" (a check verified each result) or "digest" (hashed for consensus only).
        detection: d, the self-test's floor over the hardware fault models; None: no bound.
        applies: `detail` values under which the floor holds (the self-test's variants); a case outside
            them is counted as checked, but its workload gets no bound on that unit.
        why: where `detection` comes from, in one sentence.
    """

    op: str
    per_op: float
    evidence: Evidence
    detection: float | None
    why: str
    times: str | None = None
    applies: Mapping[str, str] = field(default_factory=dict)

    def checked_ops(self, ops: float, detail: Mapping[str, object]) -> float | None:
        """The checked ops of one case that did `ops` (in its workload's ops_unit); None: not counted
        (no ops, or a detail without the value `times` names)."""
        if not positive(ops):
            return None
        factor = self.per_op
        if self.times is not None:
            times = detail.get(self.times)
            if not positive(times):
                return None
            factor *= float(times)  # type: ignore[arg-type]  # positive made it a number
        return ops * factor

    def holds_for(self, detail: Mapping[str, object]) -> bool:
        """Whether `detection` applies to a case with this `detail`."""
        return all(detail.get(k) == v for k, v in self.applies.items())


class OpKey(TypedDict):
    """What identifies a plain op in the peak cache."""

    op: str  # PlainOp.kind
    dtype: str
    shape: list[int]


@dataclass(frozen=True)
class PlainOp:
    """One plain operation a workload runs, and how much of the workload's work goes through it.

    kind: "matmul" (dtype), "int_mm" (dtype "uint8" or "int8": A's type; B is int8) or
    "embedding_bag" (dtype "int8"/"int4": the table's bit width). shape: (m, k, n) for the GEMMs;
    (rows, dim, bags, min pooling, max pooling) for EmbeddingBag. weight: the workload's ops through
    this op per cycle of its cases, to combine several ops' peaks into one (`peaks.plain_ops`).
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    weight: float

    def key(self) -> OpKey:
        """What identifies the op in the cache (the weight is the workload's, not the op's)."""
        return {"op": self.kind, "dtype": self.dtype, "shape": list(self.shape)}

    def label(self) -> str:
        return f"{self.kind} {self.dtype} {'x'.join(map(str, self.shape))}"


# PlainOps: the plain ops a case cycle runs, from the merged parameters and the unit's torch.device (in
# workload order: workloads cycle dtypes, shapes or bit widths by occurrence).
PlainOps = Callable[[Mapping[str, Any], Any], list[PlainOp]]


class Quality(enum.Enum):
    BETA = "beta"  # every workload on arrival
    PROD = "prod"  # after a clean soak


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload is, as the parent process and the documentation need it (no torch).

    Attributes:
        name: stable id, lower_snake, never renamed once merged; also its package's name.
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
        memory: the bytes one case holds at least (a bound from below: the tensors it cannot do
            without), so that sizes the host cannot hold are refused before a run (`sdcscan.run.capacity`);
            None where the workload fits itself to memory or its sizes are bounded already.
        coverage: what a pass proves (its checked ops, and the detection `sdcscan.proof`'s bound
            assumes); every per-unit workload states it, a distributed one (judged by its ranks'
            agreement) has none.
        plain_ops: the plain ops its efficiency is divided by (`sdcscan.peaks`); every per-unit
            workload states them.
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
    memory: Memory | None = None
    coverage: Coverage | None = None
    plain_ops: PlainOps | None = None

    def param_problem(self, key: str, value: object) -> str | None:
        """What is wrong with `value` for parameter `key` (None: accepted); `key` must be in `params`."""
        return self.params[key].problem(value)

    def rules_problem(self, merged: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key, problem) from the first rule the merged parameters break, or None."""
        for rule in self.rules:
            found = rule(merged)
            if found:
                return found
        return None
