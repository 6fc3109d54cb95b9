"""Project a report's size for a long burn-in from a real report: bytes per case and cases per second.

Usage: python scripts/report_size.py REPORT.json [--seconds 10000] [--units 128]
Prints JSON: the measured bytes per case and case rate, and the projected size of a report for
`--units` units running `--seconds` at the same rate.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--seconds", type=float, default=10000.0)
    ap.add_argument("--units", type=int, default=128)
    args = ap.parse_args()
    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    cases = sum(u["cases_run"] for u in report["units"])
    case_seconds = sum(sum(u["cases"]["seconds"]) for u in report["units"])
    per_case = json.dumps([u["cases"] for u in report["units"]], separators=(",", ":"))
    bytes_per_case = len(per_case) / max(cases, 1)
    fixed = os.path.getsize(args.report) - len(per_case)
    cases_per_unit_s = cases / max(case_seconds, 1e-9)
    projected = fixed + bytes_per_case * cases_per_unit_s * args.seconds * args.units
    print(
        json.dumps(
            {
                "report": os.path.basename(args.report),
                "cases": cases,
                "bytes_per_case": round(bytes_per_case, 1),
                "cases_per_unit_second": round(cases_per_unit_s, 3),
                "projected_seconds": args.seconds,
                "projected_units": args.units,
                "projected_mb": round(projected / 1e6, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
