"""The device-free cost model's table: what each workload's GPU cases launch, move and wait for.

Runs every per-unit workload of a profile at its `cuda_params` on torch's meta device under the counting
mode (sdcscan/costmodel/), and prints per kind of case: repeats, host waits (budget 1), host tensor bytes,
kernels (and per repeat with --per-repeat), the check's bytes over the outputs' (budget about 2), and the
predicted compute and check times on the chosen device class with the check's share (budget 5%, or the
reason a workload is not there yet); per workload, the start-up estimate (host tensor work, copies and
device kernels of `prepare`, predicted; budget 5 s). No GPU is needed; a lent one confirms it
(scripts/gpu_check.sh).
`--kernels fused` models every fused check kernel asked for, the ones no lent GPU has matched yet too
(sdcscan/checks/triton_kernels.py: gemm_fp's block check and the fingerprint's kernel).
Usage: python scripts/gpu_model.py [--profile doctor] [--device h200] [--kernels auto|fused] [--per-repeat]
    [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="doctor")
    ap.add_argument(
        "--device",
        default="h200",
        choices=["h100", "h200", "xeon-amx-core"],
        help="device class of the rates",
    )
    ap.add_argument("--workloads", help="comma-separated names (default: every per-unit workload)")
    ap.add_argument(
        "--kernels",
        choices=["auto", "fused"],
        default="auto",
        help="the check kernels a GPU takes by default, or every fused one asked for",
    )
    ap.add_argument("--per-repeat", action="store_true", help="also model each case at twice its repeats")
    ap.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = ap.parse_args()
    from sdcscan.costmodel import budgets
    from sdcscan.costmodel.cases import gpu_params, model_workload
    from sdcscan.costmodel.device_rates import DEVICES
    from sdcscan.errors import ProfileError

    rates = DEVICES[args.device]
    try:
        gpu_params(args.profile)
    except ProfileError as err:
        sys.exit(f"error: {err}")
    wanted = set(args.workloads.split(",")) if args.workloads else None
    rows = []
    for name, params in gpu_params(args.profile).items():
        if wanted and name not in wanted:
            continue
        cost = model_workload(name, params, kernels=args.kernels)
        per_repeat = budgets.kernels_per_repeat(name, params, kernels=args.kernels) if args.per_repeat else {}
        start = budgets.startup_figures(cost, rates)
        rows.append(
            {
                "workload": name,
                "startup_s": round(start.total_s, 3),
                "startup_host_s": round(start.host_s, 3),
                "startup_device_s": round(start.device_s, 3),
                "prepare_here_s": round(start.measured_host_s, 2),
            }
        )
        for case in cost.cases:
            f = budgets.case_figures(cost, case, rates)
            row = {
                "workload": name,
                "kind": f.kind,
                "repeats": f.repeats,
                "host_waits": f.host_waits,
                "host_bytes": f.host_bytes,
                "kernels": f.kernels,
                "check_bytes_per_output_byte": round(f.check_bytes_ratio, 2),
                "compute_ms": round(f.compute_s * 1e3, 2),
                "check_ms": round(f.check_s * 1e3, 2),
                "check_share": round(f.check_share, 4),
                "over_budget": _over(name, f),
            }
            if args.per_repeat:
                row["kernels_per_repeat"] = round(per_repeat[case.occurrence], 2)
            rows.append(row)
    if args.json:
        for row in rows:
            print(json.dumps({"profile": args.profile, "device": args.device, **row}))
        return
    _table(args.profile, args.device, rows)


def _over(name: str, f: object) -> str:
    """Why a case kind is over the base budgets of its check (bytes or share), or "" when it is not."""
    from sdcscan.costmodel import budgets

    assert isinstance(f, budgets.CaseFigures)
    over = [
        budget
        for budget, within in (
            ("check bytes", f.check_bytes_ratio <= budgets.CHECK_BYTES_PER_OUTPUT),
            ("check share", f.check_share <= budgets.CHECK_SHARE),
        )
        if not within
    ]
    stated = budgets.STATED_SHARE.get(name)
    reasons = [
        budgets.OVER_BUDGET.get((name, budget))
        or (stated[1] if stated and budget == "check share" else f"{budget}: over, with no stated reason")
        for budget in over
    ]
    return "; ".join(dict.fromkeys(reasons))


def _table(profile: str, device: str, rows: list[dict[str, object]]) -> None:
    from sdcscan.costmodel import budgets

    print(
        f"profile {profile}, rates of {device}; budgets: host waits <= {budgets.WAITS_PER_CASE}, check bytes <= "
        f"{budgets.CHECK_BYTES_PER_OUTPUT:g}x output, check <= {budgets.CHECK_SHARE:.0%} of compute, "
        f"start-up <= {budgets.STARTUP_S:g} s"
    )
    head = (
        f"{'workload':28} {'kind':22} {'reps':>5} {'waits':>5} {'host B':>7} {'kernels':>8} {'k/rep':>6} "
        f"{'chk B/out':>9} {'compute ms':>10} {'check ms':>9} {'check %':>7}"
    )
    print(head)
    reasons = {}
    for row in rows:
        if "kind" not in row:
            print(
                f"{row['workload']:28} start-up {row['startup_s']} s predicted ({row['startup_host_s']} s on the "
                f"host, {row['startup_device_s']} s on the device); its prepare took {row['prepare_here_s']} s "
                "here on the meta device"
            )
            continue
        per_repeat = row.get("kernels_per_repeat", "")
        mark = " *" if row["over_budget"] else ""
        print(
            f"{row['workload']:28} {row['kind']:22} {row['repeats']:>5} {row['host_waits']:>5} {row['host_bytes']:>7} "
            f"{row['kernels']:>8} {per_repeat!s:>6} {row['check_bytes_per_output_byte']:>9} "
            f"{row['compute_ms']:>10} {row['check_ms']:>9} {100 * row['check_share']:>6.1f}%{mark}"
        )
        if row["over_budget"]:
            reasons[row["workload"]] = row["over_budget"]
    for name, why in reasons.items():
        print(f"* {name}: {why}")


if __name__ == "__main__":
    main()
