"""gemm_fp calibrations compared across hosts: the peer check a single-unit host cannot do in its run.

`sdcscan run` holds each unit's e_max against the other units of its cohort on the same host
(`sdcscan/calibration/peers.py`). A host with one GPU has no such peer, and a cache a faulty unit wrote
is shared by every unit of its host. Hosts of one cohort (same device model, torch, threads, ISA) measure
bit-identical e_max on correct hardware, so across the fleet each host's value per (cohort, dtype,
checker, K) — the one most of its units held — is compared with the other hosts': the value a strict
majority of hosts holds is the reference, else the smallest (inflation is what hides faults). A host
holding another value gets a `calibration` finding: its gemm_fp checks were looser (or tighter) than its
peers', which is no proof of a fault, so it does not change the exit code; the next step is to remove
its cached calibration and re-run. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict

from sdcscan.calibration.peers import reference
from sdcscan.fleet.findings import Collector
from sdcscan.fleet.model import HostReport

Key = tuple[str, str, str, int]  # (cohort, dtype, checker, K)


def calibration_findings(reports: list[HostReport], col: Collector) -> None:
    """Add a `calibration` finding for every host whose e_max its cohort's other hosts do not hold."""
    groups: dict[Key, list[tuple[HostReport, float]]] = defaultdict(list)
    for r in reports:
        per_key: dict[Key, list[float]] = defaultdict(list)
        for u in r.units:
            for dtype, checker, k, e_max in u.calibration:
                per_key[(u.cohort, dtype, checker, k)].append(e_max)
        for key, values in per_key.items():
            groups[key].append((r, reference(values)))
    for (cohort, dtype, checker, k), hosts in sorted(groups.items()):
        if len({v for _, v in hosts}) < 2:
            continue
        ref = reference(v for _, v in hosts)
        holding = sum(1 for _, v in hosts if v == ref)
        for r, value in sorted(hosts, key=lambda h: (h[0].key, h[0].run_id)):
            if value == ref:
                continue
            col.add(
                r,
                None,
                "calibration",
                {
                    "cohort": cohort,
                    "dtype": dtype,
                    "checker": checker,
                    "k": k,
                    "e_max": value,
                    "reference_e_max": ref,
                    "hosts_holding_reference": holding,
                    "hosts": len(hosts),
                    "reason": (
                        f"gemm_fp {dtype} ({checker} checker) K={k}: e_max {value:.3g}, but {holding} of "
                        f"{len(hosts)} host(s) of its cohort hold {ref:.3g}; remove its cached calibration "
                        f"(state directory, calibration/) and re-run"
                    ),
                },
            )
