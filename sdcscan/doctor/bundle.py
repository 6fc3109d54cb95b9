"""The doctor's --out directory: a summary JSON, a Markdown summary for a ticket, and three tar.gz
bundles (the children's reports and self-test results, their journals, their logs). Five files,
whatever ran: a person attaches the directory, a machine reads doctor.json.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdcscan.errors import ReportError, UsageError
from sdcscan.files import check_output_target, write_json_atomic, write_text_atomic

SUMMARY, MARKDOWN = "doctor.json", "doctor.md"
# bundle name -> which work files it holds
BUNDLES: dict[str, Callable[[Path], bool]] = {
    "reports.tar.gz": lambda p: p.suffix == ".json" or p.suffix == ".out",
    "journals.tar.gz": lambda p: p.name.endswith(".journal.jsonl"),
    "logs.tar.gz": lambda p: p.suffix == ".log",
}


def check_out_dir(out: Path) -> None:
    """Create --out if it is missing; refuse one that is not a writable directory.

    Raises:
        UsageError: exit 2, before any work.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    for name in (SUMMARY, MARKDOWN, *BUNDLES):
        check_output_target(out / name, option="--out")


def write_bundle(out: Path, summary: dict[str, Any], work: Path) -> list[str]:
    """Write the five files into `out`; returns their names.

    Raises:
        ReportError: a file could not be written (the disk is full, the directory was removed).
    """
    names = [SUMMARY, MARKDOWN, *BUNDLES]
    summary["files"] = names
    for bundle, wanted in BUNDLES.items():
        _write_tar(out / bundle, sorted(p for p in work.iterdir() if p.is_file() and wanted(p)))
    write_text_atomic(out / MARKDOWN, markdown(summary))
    write_json_atomic(out / SUMMARY, summary, indent=2)
    return names


def _write_tar(target: Path, files: list[Path]) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for path in files:
                tar.add(path, arcname=path.name)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ReportError(f"cannot write {target}: {err.strerror or err}") from None


def markdown(summary: dict[str, Any]) -> str:
    """A short summary a person can paste into a ticket."""
    env: dict[str, Any] = next((s["details"] for s in summary["steps"] if s["name"] == "environment"), {})
    versions = env.get("versions", {})
    isa = env.get("isa", {})
    lines = [
        f"## sdcscan doctor on {summary['host']}: {summary['verdict']} (exit {summary['exit_code']})",
        "",
        f"- sdcscan {versions.get('sdcscan', '?')}, Python {versions.get('python', '?')}, torch "
        f"{versions.get('torch', '?')}, CUDA {versions.get('cuda') or 'none'}, driver {versions.get('driver') or 'none'}",
        f"- CPU {isa.get('cpu_model', '?')}, torch ISA {isa.get('torch_cpu_capability', '?')}, "
        f"flags {' '.join(isa.get('flags', [])) or 'none'}",
        f"- units {', '.join(summary['units'])}; budget {summary['budget_s']:g} s, took {summary['duration_s']:g} s",
        "",
        "| step | status | seconds |",
        "|---|---|---|",
        *(f"| {s['name']} | {s['status']} | {s['seconds']:g} |" for s in summary["steps"]),
        *(f"| {name} | not run | |" for name in summary["not_run"]),
    ]
    for title, items in (
        ("Findings (units that miscomputed)", summary["findings"]),
        ("Reasons", summary["reasons"]),
    ):
        if items:
            lines += ["", f"**{title}**", "", *(f"- {item}" for item in items)]
    speed: dict[str, Any] = next((s["details"] for s in summary["steps"] if s["name"] == "speed"), {})
    if speed.get("workloads"):
        lines += [
            "",
            "| kind | workload | rate | peak | efficiency | compute share |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['kind']} | {r['workload']} | {_rate(r['ops_per_s'])} | {_rate(r['peak_ops_per_s'])} "
            f"| {_num(r['efficiency'])} | {_num(r['compute_share'])} |"
            for r in speed["workloads"]
        ]
    for gpu, t in speed.get("gpus", {}).items():
        lines.append(f"- {gpu}: {t['line']}")
    return "\n".join(lines) + "\n"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e9:.1f} G/s"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
