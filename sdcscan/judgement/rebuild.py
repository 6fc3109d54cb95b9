"""Rebuild a report from a run's journal, for when the parent was killed (SIGKILL, OOM, power) mid-run.

The journal's first record describes the run (profile, seed, units, host); unit records carry cohorts
and notes; case records carry every finished outcome. The rebuilt report is judged by the same code as
a live run, and its verdict is `interrupted`: the run did not end normally, so nothing in it is a pass.
Records are read as JSON values (`object`) and each field is checked before it is used: a journal is
a file anyone may have edited. `sdcscan report --from-journal` is the command.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from sdcscan.errors import ReportError
from sdcscan.journal import read_journal
from sdcscan.judgement.assemble import UnitFacts, judge_and_build
from sdcscan.outcomes import CaseOutcome
from sdcscan.report.document import Host, Report, Run
from sdcscan.timefmt import iso_utc

_RUN_KEYS = ("id", "profile", "seed", "budget_s", "started_at", "units", "hostname")
_STATUSES = ("ok", "mismatch", "error")
LATEST_TIME = 1e11  # seconds since the epoch: the year 5138


def report_from_journal(path: str | os.PathLike[str]) -> Report:
    """The report (verdict `interrupted`) of the last run recorded in the journal at `path`.

    Raises:
        ReportError: unreadable or not a regular file (`JSONFileError`), not a journal, or written by
            an sdcscan too old to rebuild from.
    """
    p = Path(path)
    try:
        records = read_journal(p)
    except OSError as err:  # the bounded reader refused nothing, but reading failed part way
        raise ReportError(f"{p}: cannot read journal: {err.strerror or err}") from None
    starts = [i for i, r in enumerate(records) if r.get("type") == "run"]
    if not starts:
        raise ReportError(f"{p}: not an sdcscan journal (no run record)")
    # Journals are per run now; one written by an sdcscan that reused `<stem>.journal.jsonl` for every
    # run with the same --out holds several runs, and the last one is the one that lost its report.
    records = records[starts[-1] :]
    run = records[0]
    missing = [k for k in _RUN_KEYS if k not in run]
    if missing or not isinstance(run["units"], list) or not isinstance(run["profile"], dict):
        raise ReportError(
            f"{p}: run record lacks {', '.join(missing) or 'valid units'}; cannot rebuild a report"
        )
    try:
        return _build(run, records[1:])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ReportError(f"{p}: malformed journal record ({type(err).__name__}: {err})") from None


Record = dict[str, object]


def _build(run: Record, records: list[Record]) -> Report:
    unit_recs = {u: r for r in records if r.get("type") == "unit" and isinstance(u := r.get("unit"), str)}
    problems: dict[str, str] = {}
    for r in records:
        if r.get("type") == "problem" and isinstance(u := r.get("unit"), str):
            problems.setdefault(u, str(r.get("reason")))
    outcomes = [r for r in records if r.get("type") == "case" and _is_case(r)]
    units: list[Record] = []
    for u in cast(list[Record], run["units"]):  # checked to be a list by the caller; a unit not a dict
        rec = unit_recs.get(str(u["id"]), {})  # raises TypeError, reported as a malformed record
        notes = rec.get("notes")
        units.append(
            {
                **u,
                "cohort": rec.get("cohort") or "",
                "notes": list(notes) if isinstance(notes, list) else [],
                "peaks": _dict(rec.get("peaks")),
            }
        )
    started = _time(run)
    last_t = max([t for r in records if (t := _time(r)) is not None] + [started or 0.0])
    run_doc = {k: v for k, v in run.items() if k not in ("type", "t", "hostname", "host", "units")}
    run_doc.update(
        ended_at=iso_utc(last_t),
        duration_s=round(max(0.0, last_t - (last_t if started is None else started)), 3),
        interrupted_by="journal",  # rebuilt: the run never wrote its own report
    )
    software = next((sw for r in unit_recs.values() if isinstance(sw := r.get("software"), dict)), None)
    return judge_and_build(  # the run record's keys were checked above (_RUN_KEYS); its units are the run's
        run=cast(Run, run_doc),
        host=cast(Host, {**_dict(run.get("host")), "hostname": run["hostname"]}),
        software=_dict(software),
        cohorts={
            c: _dict(r.get("cohort_fields"))
            for r in unit_recs.values()
            if isinstance(c := r.get("cohort"), str) and c
        },
        units=cast(list[UnitFacts], units),
        outcomes=cast(list[CaseOutcome], outcomes),  # each one passed _is_case
        problems=problems,
        interrupted="journal",
    )


def _time(r: Record) -> float | None:
    """A record's time (`t`, seconds since the epoch), or None when absent or not a finite number: a
    damaged time must not cost the rebuilt report the cases around it."""
    t = r.get("t")
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < LATEST_TIME:
        return None  # also NaN, Infinity and a time no clock gives, which no date can show
    return float(t)


def _is_case(r: Record) -> bool:
    """A well-formed case record; anything else (a hand-edited or foreign line) is skipped."""
    return (
        isinstance(r.get("unit"), str)
        and isinstance(r.get("index"), int)
        and isinstance(r.get("attempt", 0), int)
        and isinstance(r.get("workload"), str)
        and r.get("status") in _STATUSES
    )


def _dict(value: object) -> Record:
    """An object of the journal as it was kept (the unit's peaks, its cohort's fields, the host);
    anything but an object counts as none."""
    return cast(Record, value) if isinstance(value, dict) else {}
