"""Workload registry: one import line per workload module below."""

from __future__ import annotations

import difflib
from typing import Any

from sdcscan.errors import UsageError
from sdcscan.workloads import (  # noqa: F401  (registers the workloads)
    embbag_int8,
    gemm_fp,
    gemm_int8,
    matmul_golden,
    train,
)
from sdcscan.workloads.base import REGISTRY


def get(name: str) -> Any:
    """The workload class called `name`; an unknown name raises UsageError with a suggestion."""
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, REGISTRY, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(REGISTRY))})"
        raise UsageError(f"unknown workload {name!r}{hint}") from None
