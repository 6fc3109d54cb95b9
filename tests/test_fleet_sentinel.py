"""Kernel-log evidence in `sdcscan compare` (issue 14): a report's `sentinel` section names outlier cores;
compare gives each a `sentinel` finding, and one more when a core index is an outlier on several hosts
of one CPU model. Neither changes the exit code; hostile section values are ignored, never a crash."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from sdcscan.errors import ReportError
from sdcscan.files import JSONFileError, parse_json
from sdcscan.fleet.compare import FleetSummary, summarize
from sdcscan.fleet.kernel_evidence import read_section
from sdcscan.fleet.model import Extractor
from sdcscan.render.fleet import describe, render_compare
from tests.helpers.fleet import extract, report
from tests.helpers.hostile import MUTATIONS, Mutation, Path_, field_paths, mutated_text

MODEL_A = "Intel(R) Xeon(R) Platinum 8480+"
MODEL_B = "AMD EPYC 9654 96-Core Processor"


def outlier(unit: str = "cpu:7", programs: int = 9) -> dict[str, Any]:
    """A `CoreOutlier.to_dict()` as `sdcscan sentinel` writes it."""
    return {
        "unit": unit,
        "programs": programs,
        "expected": 0.6,
        "peers": 63,
        "p_value": 2e-9,
        "events": 14,
        "examples": ["python3", "java", "sshd", "gcc", "ld"],
    }


def host(
    name: str, *, model: str | None = MODEL_A, cores: tuple[str, ...] = (), section: bool = True, **kw: Any
) -> dict[str, Any]:
    """A healthy host's report, with a sentinel section naming `cores` as outliers (or none at all)."""
    doc = report(name, **kw)
    if model is not None:
        doc["host"]["cpu_model"] = model
    if section:
        doc["sentinel"] = {
            "since": "2025-05-25T00:00:00Z",
            "until": "2025-06-01T00:00:00Z",
            "sources": ["journal"],
            "notes": [],
            "stats": {"lines": 1000, "events": 40, "skipped": 0},
            "host_counts": {"segfault": 38, "trap": 2, "mce": 0, "xid": 0},
            "units": {"cpu:7": {"unit": "cpu:7", "counts": {"segfault": 14}, "processes": 10, "programs": 9}},
            "outliers": [outlier(c) for c in cores],
        }
    return doc


def sentinel_rows(fleet: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    s = summarize(extract(fleet))
    assert s.exit_code == 0
    return [(f.host, f.unit) for f in s.findings if f.kind == "sentinel"]


def test_reports_without_outliers_give_no_sentinel_finding():
    """No section, an empty section, or hosts of one model with clean sections: no finding, exit 0."""
    fleet = [host("a"), host("b"), host("c", section=False), host("d", model=None)]
    s = summarize(extract(fleet))
    assert s.findings == () and s.exit_code == 0 and s.counts["sentinel"] == 0


def test_a_host_whose_report_names_an_outlier_core_gets_a_finding_and_compare_still_exits_0():
    """The finding names the host and the core, its evidence and the burn-in to run; exit code unchanged."""
    s = summarize(extract([host("a"), host("b", cores=("cpu:7", "cpu:12"))]))
    assert [(f.host, f.unit, f.kind) for f in s.findings] == [
        ("b", "cpu:12", "sentinel"),
        ("b", "cpu:7", "sentinel"),
    ]
    assert s.exit_code == 0 and s.to_dict()["exit_code"] == 0
    e = s.findings[1].evidence
    assert (e["programs"], e["expected"], e["p_value"], e["cpu_model"]) == (9, 0.6, 2e-9, MODEL_A)
    assert e["examples"] == ["python3", "java", "sshd", "gcc", "ld"]
    assert "9 different programs crashed on it (python3, java, sshd, gcc, ld, …)" in e["reason"]
    assert "between 2025-05-25T00:00:00Z and 2025-06-01T00:00:00Z" in e["reason"]
    assert e["reason"].endswith("sdcscan run --units cpu:7 -p burnin")
    json.dumps(s.to_dict(), allow_nan=False)


def test_the_same_core_on_several_hosts_of_one_model_is_one_fleet_finding():
    """cpu:0 an outlier on 3 of 4 hosts of model A: a fleet finding with the count; model B's one host
    with cpu:0, and cpu:5 on one host, make none."""
    fleet = [
        host("a1", cores=("cpu:0",)),
        host("a2", cores=("cpu:0", "cpu:5")),
        host("a3", cores=("cpu:0",)),
        host("a4"),
        host("b1", model=MODEL_B, cores=("cpu:0",)),
    ]
    s = summarize(extract(fleet))
    fleet_wide = [f for f in s.findings if f.host.startswith("fleet: ")]
    assert [(f.host, f.unit) for f in fleet_wide] == [(f"fleet: {MODEL_A}", "cpu:0")]
    e = fleet_wide[0].evidence
    assert (e["hosts"], e["hosts_with_sentinel"], e["host_names"], e["cpu_model"]) == (
        3,
        4,
        ["a1", "a2", "a3"],
        MODEL_A,
    )
    assert "cpu:0 is an outlier core on 3 of 4 host(s) of this CPU model" in e["reason"]
    assert len([f for f in s.findings if f.kind == "sentinel"]) == 6 and s.exit_code == 0


def test_different_cores_or_unknown_models_make_no_fleet_finding():
    """Two hosts of one model with different outlier cores, or hosts without a CPU model: per-host only."""
    rows = sentinel_rows([host("a1", cores=("cpu:1",)), host("a2", cores=("cpu:2",))])
    assert rows == [("a1", "cpu:1"), ("a2", "cpu:2")]
    rows = sentinel_rows([host("x", model=None, cores=("cpu:1",)), host("y", model=None, cores=("cpu:1",))])
    assert rows == [("x", "cpu:1"), ("y", "cpu:1")]


def test_a_hosts_newest_sentinel_section_is_the_one_that_counts():
    """An older report (another plan) named cpu:7; the newer one's section is clean: no finding. The other
    way round, the newer one's cores are named."""
    may, june, july = (f"2025-0{m}-01T00:00:00Z" for m in (5, 6, 7))
    old = host("a", cores=("cpu:7",), seed=1, run_id="r1", ended_at=may)
    new = host("a", seed=2, run_id="r2", ended_at=june)
    assert len(summarize(extract([old, new])).superseded) == 0  # both vote: two plans
    assert sentinel_rows([old, new]) == []
    old_clean = host("a", seed=1, run_id="r1", ended_at=may)
    new_bad = host("a", cores=("cpu:3",), seed=2, run_id="r2", ended_at=june)
    assert sentinel_rows([old_clean, new_bad]) == [("a", "cpu:3")]
    no_section = host("a", seed=3, run_id="r3", ended_at=july, section=False)
    assert sentinel_rows([new_bad, no_section]) == [("a", "cpu:3")]  # a report without a section says nothing


def test_compare_shows_sentinel_findings_and_what_to_do():
    """The table row reads the evidence; the next step says to screen the cores."""
    s = summarize(extract([host("a", cores=("cpu:7",)), host("b", cores=("cpu:7",))]))
    out = StringIO()
    render_compare(s, Console(file=out, width=300, no_color=True))
    text = out.getvalue()
    assert "sentinel" in text and f"fleet: {MODEL_A}" in text
    assert "Next: screen the cores the kernel logs point at" in text
    assert describe(s.findings[0]).startswith("kernel logs between")


def test_read_section_keeps_only_well_formed_cpu_outliers():
    """Entries that are not objects, name no `cpu:N`, or repeat a unit are left out and counted."""
    section = read_section(
        {
            "outliers": [
                outlier("cpu:3"),
                outlier("cpu:3"),
                outlier("cuda:0"),
                outlier("cpu:007"),
                "x",
                None,
                {
                    **outlier("cpu:1"),
                    "programs": True,
                    "expected": float("nan"),
                    "p_value": 7.0,
                    "examples": [1, "ok"],
                },
            ],
            "since": 5,
            "until": "2025-06-01T00:00:00Z" + "x" * 500,
        }
    )
    assert section is not None
    assert [c.unit for c in section.outliers] == ["cpu:1", "cpu:3"] and section.ignored == 5
    c1 = section.outliers[0]
    assert (c1.programs, c1.expected, c1.p_value, c1.examples) == (None, None, None, ("ok",))
    assert section.since is None and section.until is not None and len(section.until) == 40
    assert read_section(None) is None and read_section([]) is None
    assert read_section({}) is not None and read_section({"outliers": {"cpu:1": 1}}).outliers == ()  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# Hostile values: every field of the section (and host.cpu_model) spoiled, one at a time


BASE = host("hostile", cores=("cpu:7",))
COMPANION = host("companion", cores=("cpu:7",))
PATHS = [p for p in field_paths(BASE) if p[0] == "sentinel" or p[:2] == ("host", "cpu_model")]


_JUDGED: dict[str, FleetSummary] = {}


def _summarize_text(text: str) -> int:
    """Extract and compare `text` with a good companion; render and serialise; return sentinel findings."""
    try:
        data = parse_json(text)
        r = Extractor().extract(data, source="hostile.json")
    except (JSONFileError, ReportError):
        return -1  # refused with a reason (a 5000-digit number, nesting beyond a report's depth)
    # Most spoiled fields extract to a report seen before: judge each distinct one once (summarize is
    # deterministic, and a DuckDB run costs about 0.1 s).
    s = _JUDGED.get(repr(r))
    if s is None:
        s = _JUDGED[repr(r)] = summarize([r, *extract([COMPANION])])
    assert s.exit_code == 0 and {f.kind for f in s.findings} <= {"sentinel"}
    json.dumps(s.to_dict(), allow_nan=False)
    out = StringIO()
    render_compare(s, Console(file=out, width=200, no_color=True))
    assert "\x1b" not in out.getvalue()
    return sum(1 for f in s.findings if f.kind == "sentinel")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: ".".join(map(str, p)))
def test_a_spoiled_sentinel_field_is_ignored_never_a_crash(path: Path_):
    """None, wrong types, NaN, huge numbers, markup, control characters, nesting, removal: compare goes on,
    exits 0, and the companion's finding is still there."""
    refused = 0
    for mutation in MUTATIONS:
        n = _summarize_text(mutated_text(BASE, path, mutation))
        refused += n < 0
        assert n < 0 or n >= 1, mutation.name  # the companion's cpu:7 at least
    assert refused <= 3, path  # only the raw-JSON mutations a report reader refuses outright


def test_hostile_outlier_examples_are_shown_literally():
    """A program name with markup or escape sequences reaches the table as visible text, not as styling."""
    doc = host("evil", cores=("cpu:7",))
    doc["sentinel"]["outliers"][0]["examples"] = ["[bold red]x[/]", "\x1b[2J\x07", "[/x]"]
    _summarize_text(json.dumps(doc))
    s = summarize(extract([doc]))
    out = StringIO()
    render_compare(s, Console(file=out, width=300, no_color=True))
    assert "[bold red]x[/]" in out.getvalue() and "\\x1b[2J" in out.getvalue()


def test_the_mutation_list_covers_what_the_hostile_helpers_promise():
    """The paths reach into the outlier entries (so the loop above tests them), and removal is among the mutations."""
    assert ("sentinel", "outliers", 0, "p_value") in PATHS and ("host", "cpu_model") in PATHS
    assert any(isinstance(m, Mutation) and m.remove for m in MUTATIONS)
