"""The fleet simulator plants faults; `compare` must find exactly those and nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from click.testing import CliRunner

from sdcscan.cli.fleet import compare
from sdcscan.report import SCHEMA_PATH
from tests.helpers.scripts import load_script


def simulate(tmp: Path, hosts: int = 40, seed: int = 5) -> tuple[Path, dict[str, Any]]:
    """A small simulated fleet and its manifest."""
    out = tmp / "fleet"
    return out, load_script("simulate_fleet").simulate(hosts, 8, 40, out, seed)


def test_simulated_reports_follow_the_schema(tmp_path: Path):
    """Every host report (healthy and faulty) validates against report.schema.json."""
    out, manifest = simulate(tmp_path, hosts=12)
    schema = json.loads(SCHEMA_PATH.read_text())
    reports = sorted((out / "reports").glob("[0-9]*/*.json"))
    assert len(reports) == 12
    for p in reports:
        jsonschema.validate(json.loads(p.read_text()), schema)
    assert {f["fault"] for f in manifest["faults"]} == {
        "partition",
        "persistent",
        "intermittent",
        "invariant",
        "slow",
        "invalid",
    }


def test_compare_finds_exactly_the_planted_faults(tmp_path: Path):
    """Every planted fault is found (divergent, invariant, slow, invalid, missing, stale); nothing else."""
    out, manifest = simulate(tmp_path)
    args = [str(out / "reports"), "--hosts", str(out / "hosts.txt"), "--now", manifest["now"], "--json"]
    result = CliRunner().invoke(compare, args)
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    found = sorted(
        ({"host": f["host"], "unit": f["unit"], "kind": f["kind"]} for f in doc["findings"]),
        key=lambda e: (e["kind"], e["host"], e["unit"] or ""),
    )
    assert found == manifest["expected_findings"]
    (group,) = doc["groups"]
    planted = sorted((f["host"], f["unit"]) for f in manifest["faults"] if f["fault"] == "partition")
    assert sorted((m["host"], m["unit"]) for m in group["members"]) == planted
    assert group["shared_cases"] == 2
    skipped = {Path(s["path"]).relative_to(out).as_posix(): s["reason"] for s in doc["skipped"]}
    assert len(skipped) == len(manifest["skipped"])
    for s in manifest["skipped"]:
        assert s["reason_contains"] in skipped[s["path"]]
    assert "Findings:" in result.stderr


def test_simulator_is_deterministic(tmp_path: Path):
    """The same seed writes the same fleet."""
    a, _ = simulate(tmp_path / "a", hosts=8)
    b, _ = simulate(tmp_path / "b", hosts=8)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
