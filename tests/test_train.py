"""`train`: digests are bit-identical on repeats and across pinned processes; one flipped weight bit changes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from sdcscan.faults import FaultSpec
from sdcscan.outcomes import STATUS_MISMATCH, Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.train.workload import Train
from tests.helpers.cli import child_env

PARAMS = {**Train.spec.defaults, "hidden": 32, "batch": 16, "steps": 12}


def _run(fault=None, seed=77):
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=PARAMS)
    w = Train(PARAMS)
    w.prepare(ctx)
    ctx.begin_case(fault)
    return w.run(ctx, Case(index=0, workload="train", seed=seed, occurrence=0))


def test_single_bit_flip_in_one_weight_mid_case_changes_the_digest():
    """Bit 0 (the least significant mantissa bit) of one hidden weight, half way through, is enough."""
    clean = _run()
    flipped = _run(FaultSpec("bitflip", "weight", seed=3, element=5, bit=0))
    assert flipped.status == "ok"  # too small to make anything non-finite ...
    assert flipped.digest != clean.digest  # ... but the digest sees it


def test_nan_in_a_weight_is_an_invariant_failure():
    out = _run(FaultSpec("nan", "weight", seed=3, element=5))
    assert out.status == STATUS_MISMATCH and out.mismatches[0].check == "finite"


def test_case_seed_changes_the_digest():
    assert _run(seed=1).digest != _run(seed=2).digest


_CHILD = """
import json, os, sys, torch
os.sched_setaffinity(0, {int(sys.argv[1])})
torch.set_num_threads(1)
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.train.workload import Train
params = json.loads(sys.argv[2])
ctx = Context(unit="x", device=torch.device("cpu"), run_seed=1, params=params)
w = Train(params); w.prepare(ctx); ctx.begin_case(None)
print(w.run(ctx, Case(index=0, workload="train", seed=5, occurrence=0)).digest)
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_digest_is_identical_across_processes_pinned_to_different_cpus():
    """Units of one cohort agree bit for bit: the basis of consensus."""
    cpus = sorted(os.sched_getaffinity(0))
    digests = set()
    for cpu in (cpus[0], cpus[-1]):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(cpu), json.dumps(PARAMS)],
            capture_output=True,
            text=True,
            env=child_env(),
            check=True,
            timeout=120,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1 and "" not in digests
