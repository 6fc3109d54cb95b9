"""A unit's integer pools are the same bits on any thread count (the counter-based generator draws them
where the unit computes, issue 42): a cohort's units on hosts of different sizes multiply the same data,
or they would accuse each other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from sdcscan.workloads.base import Context
from sdcscan.workloads.embbag_int8.workload import EmbbagInt8
from sdcscan.workloads.gemm_int8.workload import GemmInt8

# Large enough that torch splits the work among threads (its grain is 32768 elements).
EMBBAG = {"rows": 200_000, "dim": 64, "bags": 2048, "pooling": [20, 60], "bits": [8, 4]}
GEMM_INT8 = {"shapes": [[64, 2048, 512], [8, 1024, 1024]], "ops_per_case": 1.0e8}


@pytest.fixture
def threads() -> Iterator[None]:
    own = torch.get_num_threads()
    yield
    torch.set_num_threads(own)


def _context(device: str) -> Context:
    return Context(unit=device, device=torch.device(device), run_seed=20261127, params={})


def _embbag_pools(thread_count: int) -> list[torch.Tensor]:
    torch.set_num_threads(thread_count)
    workload = EmbbagInt8({**EmbbagInt8.spec.defaults, **EMBBAG})
    workload.prepare(_context("cpu"))
    return [*workload.tables.values(), *workload.row_sums.values(), *workload.prefix.values(), workload.ids]


def _gemm_int8_pools(thread_count: int) -> list[torch.Tensor]:
    torch.set_num_threads(thread_count)
    workload = GemmInt8({**GemmInt8.spec.defaults, **GEMM_INT8})
    workload.prepare(_context("cpu"))
    weights = [w.w_ext for encoded in workload.weights.values() for w in encoded]
    rows = workload.activations.values()
    return [*(r.rows for r in rows), *(r.prefix for r in rows), *weights]


@pytest.mark.parametrize("pools", [_embbag_pools, _gemm_int8_pools], ids=["embbag_int8", "gemm_int8"])
def test_the_pools_are_the_same_bits_on_one_thread_and_on_several(threads: None, pools) -> None:
    """The pools a unit prepares, drawn here on the CPU at 1 and 4 threads."""
    one, several = pools(1), pools(4)
    assert len(one) == len(several) > 3
    for a, b in zip(one, several, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
