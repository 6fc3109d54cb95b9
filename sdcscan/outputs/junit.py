"""JUnit XML from a report, for CI systems: one testsuite per unit, one testcase per workload of the plan.

A testcase fails when the unit miscomputed in that workload (an invariant fired, or its digest
disagreed with its cohort), errors when the workload raised or the unit could not be judged
(invalid, interrupted), and is skipped when the budget ended before the unit reached it.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter

from sdcscan.files import write_text_atomic
from sdcscan.report.document import Mismatch, Report, Unit

MAX_LISTED_MISMATCHES = 20  # per testcase body: enough to see the pattern, small enough for a CI page
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def write_junit(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the report as JUnit XML to `path`, atomically.

    Raises:
        ReportError: the file could not be written, or `path` exists and is not a regular file or
            is a symlink (`sdcscan.files.replace_problem`: /dev/null is never replaced).
    """
    write_text_atomic(path, junit_xml(report))


def junit_xml(report: Report) -> str:
    """The report as a JUnit XML document (a <testsuites> root)."""
    root = ET.Element("testsuites", name="sdcscan")
    totals: Counter[str] = Counter()
    for unit in report["units"]:
        suite = _suite(report, unit)
        root.append(suite)
        for key in ("tests", "failures", "errors", "skipped"):
            totals[key] += int(suite.get(key, "0"))
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    root.set("time", _secs(report["run"].get("duration_s", 0.0)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(report: Report, unit: Unit) -> ET.Element:
    run, uid, host = report["run"], unit["id"], report["host"]["hostname"]
    # The host in the names: a CI job that collects several hosts' files keeps their units apart.
    suite = ET.Element("testsuite", name=f"{host}/{uid}", hostname=host)
    suite.set("timestamp", str(run.get("started_at", "")).removesuffix("Z"))
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_id", run["id"]), ("profile", run["profile"]["name"]), ("seed", run["seed"]),
        ("unit_verdict", unit["verdict"]), ("reason", unit.get("reason") or ""),
        ("model", unit.get("model", "")), ("cohort", unit.get("cohort", "")),
    ):  # fmt: skip
        ET.SubElement(props, "property", name=name, value=_clean(str(value)))
    counts: Counter[str] = Counter()
    total = 0.0
    for wl in _plan_workloads(report, unit):
        case, outcome, seconds = _testcase(report, unit, wl)
        suite.append(case)
        counts["tests"] += 1
        counts[outcome] += 1
        total += seconds
    for key in ("tests", "failures", "errors", "skipped"):
        suite.set(key, str(counts[key]))
    suite.set("time", _secs(total))
    return suite


def _plan_workloads(report: Report, unit: Unit) -> list[str]:
    """The plan's workloads in plan order, then any the unit ran that the plan does not list."""
    planned = list(report["run"].get("workloads") or [])
    return planned + [w for w in sorted(set(unit["cases"]["workload"])) if w not in planned]


def _testcase(report: Report, unit: Unit, wl: str) -> tuple[ET.Element, str, float]:
    """One testcase and its outcome: "passed", "failures", "errors" or "skipped"."""
    cols, uid = unit["cases"], unit["id"]
    rows = [i for i, w in enumerate(cols["workload"]) if w == wl]
    seconds = sum(cols["seconds"][i] for i in rows)
    host = report["host"]["hostname"]
    case = ET.Element("testcase", classname=f"sdcscan.{host}.{uid}", name=wl, time=_secs(seconds))
    bad = [cols["index"][i] for i in rows if cols["status"][i] == "mismatch"]
    raised = [cols["index"][i] for i in rows if cols["status"][i] == "error"]
    mism = [m for m in report.get("mismatches", []) if m["unit"] == uid and m["workload"] == wl]
    reason = unit.get("reason") or ""
    if bad or mism:
        first = min(bad or [m["index"] for m in mism])
        msg = f"{uid} computed wrong results in {wl}: {len(bad) or '?'} case(s), first case {first}"
        _child(case, "failure", "invariant", msg, _mismatch_text(unit, mism))
        return case, "failures", seconds
    if raised:
        msg = f"{wl} raised on {uid} in {len(raised)} case(s), first case {raised[0]}"
        _child(case, "error", "workload_error", msg)
        return case, "errors", seconds
    if unit["verdict"] == "fail" and _blamed_by_consensus(unit, wl, report):
        _child(case, "failure", "consensus", f"{uid} in {wl}: {reason}", _mismatch_text(unit, []))
        return case, "failures", seconds
    if unit["verdict"] in ("invalid", "interrupted"):
        _child(case, "error", unit["verdict"], f"{uid} could not be judged: {reason or unit['verdict']}")
        return case, "errors", seconds
    if not rows:
        _child(case, "skipped", None, f"{uid} did not reach {wl} within the budget")
        return case, "skipped", seconds
    return case, "passed", seconds


def _blamed_by_consensus(unit: Unit, wl: str, report: Report) -> bool:
    """A failed unit with no invariant evidence: blame the workloads of the disputes it lost, else all it ran."""
    uid, cols = unit["id"], unit["cases"]
    invariant = any(m["unit"] == uid for m in report.get("mismatches", []))
    if invariant or "mismatch" in cols["status"]:
        return False  # its failure is explained by invariant evidence in some other workload
    lost = {
        d["workload"]
        for d in report.get("disputes", [])
        if uid in d["digests"] and d["digests"][uid] != d.get("majority")
    }
    return wl in lost if lost else wl in cols["workload"]


def _mismatch_text(unit: Unit, mism: list[Mismatch]) -> str:
    lines = [f"unit {unit['id']} verdict {unit['verdict']}: {unit.get('reason') or ''}"]
    if unit.get("first_bad_case") is not None:
        lines.append(f"first bad case: {unit['first_bad_case']}")
    for m in mism[:MAX_LISTED_MISMATCHES]:
        lines.append(
            f"case {m['index']} {m['check']} at {m['where']}: expected {m['expected']} actual {m['actual']}"
            + (f" mask {m['mask']}" if m.get("mask") else "")
        )
    if len(mism) > MAX_LISTED_MISMATCHES:
        lines.append(f"... and {len(mism) - MAX_LISTED_MISMATCHES} more mismatches in the report")
    return "\n".join(lines)


def _child(case: ET.Element, tag: str, kind: str | None, message: str, text: str = "") -> None:
    el = ET.SubElement(case, tag, message=_clean(message))
    if kind:
        el.set("type", kind)
    if text:
        el.text = _clean(text)


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, even escaped."""
    return _XML_ILLEGAL.sub("?", text)


def _secs(value: float) -> str:
    return f"{float(value):.3f}"
