"""What a workload is, as the parent process and the documentation need it: `WorkloadSpec` (no torch).

Each workload declares its `SPEC` in `sdcscan/workloads/<name>/spec.py`, beside its torch code
(`<name>/workload.py`); the catalogue (`sdcscan.workloads`) collects them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sdcscan.workloads.params import Param

# Rule: a check of the merged parameters (defaults < profile < command line) that no single one decides;
# it returns (key, problem) or None.
Rule = Callable[[Mapping[str, Any]], tuple[str, str] | None]
# Memory: the bytes one case must hold at least, from the merged parameters (its largest tensors).
Memory = Callable[[Mapping[str, Any]], int]
DTYPE_BYTES = {"float64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


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
            without), so that sizes the host cannot hold are refused before a run (`sdcscan.capacity`);
            None where the workload fits itself to memory or its sizes are bounded already.
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
