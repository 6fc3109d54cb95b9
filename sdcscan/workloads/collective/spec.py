"""`collective`'s catalogue entry, its dtypes and block limit (torch-free; the torch code is workload.py)."""

from __future__ import annotations

from sdcscan.outcomes import INVARIANT
from sdcscan.workloads.params import Choice, Int, ListOf
from sdcscan.workloads.workload_spec import Quality, WorkloadSpec

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
DTYPES = ("bfloat16", "float16", "float32", "int32")
# elements per block: 512 MiB of float32, and its exact data needs ~40 B of host memory per element (~5 GB)
MAX_BLOCK = 2**27


SPEC = WorkloadSpec(
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
        # COLLECTIVES restates sdcscan.collectives.calls.COLLECTIVES (which imports torch);
        # tests/test_workload_collective.py checks it
        "collectives": ListOf(Choice(COLLECTIVES)),
        "dtypes": ListOf(Choice(DTYPES)),
        "sizes": ListOf(Int(1, MAX_BLOCK)),
        "triage_budget": Int(1, 1024),
    },
    distributed=True,
)
