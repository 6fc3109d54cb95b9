"""`report --from-journal` keeps every finished case whatever a damaged record's time says (issue 33).

A journal line with `Infinity` (or NaN, or a time beyond any clock) as its time was an internal error:
the report of the run was lost with it. Such a time is now ignored; the cases stand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdcscan.judgement.rebuild import report_from_journal
from sdcscan.timefmt import iso_utc

T0 = 1_764_000_000.0


def _journal(path: Path, bad_time: str) -> None:
    run = {
        "type": "run", "id": "20251124T000000Z-abcd", "profile": {"name": "quick", "sha256": "0" * 64},
        "seed": 7, "budget_s": 60.0, "started_at": "2025-11-24T00:00:00Z", "hostname": "node-a",
        "units": [{"id": "cpu:0", "kind": "cpu", "index": 0, "model": "m"}], "t": T0,
    }  # fmt: skip
    case = {
        "type": "case",
        "unit": "cpu:0",
        "attempt": 0,
        "workload": "train",
        "status": "ok",
        "seconds": 0.5,
    }
    lines = [json.dumps(run)]
    lines += [json.dumps({**case, "index": i, "digest": f"d{i}", "t": T0 + i}) for i in range(3)]
    lines.append(json.dumps({**case, "index": 3, "digest": "d3"})[:-1] + f', "t": {bad_time}}}')
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("bad_time", ["Infinity", "-Infinity", "NaN", "1e300", "true", '"noon"'])
def test_a_damaged_time_costs_no_case(tmp_path: Path, bad_time: str) -> None:
    path = tmp_path / "r.x.journal.jsonl"
    _journal(path, bad_time)
    report = report_from_journal(path)
    assert report["units"][0]["cases"]["index"] == [0, 1, 2, 3]
    assert report["run"]["duration_s"] == 2.0  # from the times that are times
    assert report["run"]["ended_at"] == iso_utc(T0 + 2)
