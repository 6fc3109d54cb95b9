"""The run page's evidence beside the verdict: telemetry, re-tests, the kernel log, mismatching cases.

The validator leaves the telemetry's values, the re-test records and the sentinel section unchecked
(`report.document`: no reader relies on their shape), so every value here is read through `_num` and
`_word`: a number that is not one is a dash, a string is escaped, anything else is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sdcscan.outcomes import unit_order
from sdcscan.render.html.page import badge, facts, section, table
from sdcscan.render.html.svg import HALF, Chart, Scale, esc, fmt_num, nice_ticks
from sdcscan.report.document import Report

GAUGES = ("mean", "max", "min")  # reductions of a level (a temperature, a clock): drawn per unit
MAX_COLUMNS = 128  # units of one telemetry chart (the first, in unit order)
MAX_SERIES_POINTS = 512  # points drawn of one series (the sampler keeps at most 240; a hostile file more)
PALETTE = 8  # scopes of one series chart drawn in a colour each (the page's c0..c7); beyond, grey
MAX_EVENT_UNITS = 48
EVENT_KINDS = (("segfault", "segfaults"), ("trap", "traps"), ("mce", "machine checks"), ("xid", "Xids"))


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _word(value: object) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


# -- telemetry -------------------------------------------------------------------------------------


def telemetry_section(report: Report) -> str:
    """One chart per gauge (each scope's reduced value, first and last reading), a table of counters."""
    tel = _dict(report.get("telemetry"))
    if not tel:
        return section("Telemetry", '<p class="note">The report holds no telemetry.</p>', anchor="telemetry")
    scopes: list[tuple[str, Mapping[str, object]]] = [("host", _dict(tel.get("host")))]
    units = _dict(tel.get("units"))
    scopes += [(u, _dict(units[u])) for u in sorted(units, key=unit_order)]
    metrics = sorted({m for _, ms in scopes for m in ms})
    charts, counters = [], []
    for metric in metrics:
        rows = [(scope, _dict(ms.get(metric))) for scope, ms in scopes if metric in ms]
        reduce = next((_word(s.get("reduce")) for _, s in rows if s.get("reduce")), "")
        if reduce in GAUGES:
            drawn = _series_chart(metric, reduce, rows) or _gauge_chart(metric, reduce, rows)
            charts.append(drawn)
        else:
            counters += [_counter_row(metric, reduce, scope, s) for scope, s in rows]
    sources = ", ".join(f"{k} {_word(v) or '?'}" for k, v in sorted(_dict(tel.get("sources")).items()))
    head = facts(
        [
            ("samples", tel.get("samples", "-")),
            ("every", f"{_num(tel.get('interval_s')) or 0:g} s"),
            ("from", _word(tel.get("started_at")) or "-"),
            ("to", _word(tel.get("ended_at")) or "-"),
            ("sources", sources or "-"),
        ]
    )
    notes = tel.get("notes")
    note_list = (
        "".join(f"<li>{esc(n)}</li>" for n in notes if isinstance(n, str)) if isinstance(notes, list) else ""
    )
    counter_table = (
        table(["metric", "scope", "kept", "first", "last", "change"], counters, numeric=(3, 4, 5))
        if counters
        else ""
    )
    body = head + '<div class="grid2">' + "".join(c for c in charts if c) + "</div>" + counter_table
    body += f"<ul>{note_list}</ul>" if note_list else ""
    note = (
        "The sampler keeps, per metric, its first and last reading and one value reduced over the run (the "
        "mean of a clock or load, the maximum of a temperature or power, the last of a counter), and for a "
        "gauge a series of at most 240 points, each reduced the same way over its stretch of the run, in "
        "constant memory. Lines: a gauge over the run, one per scope; where a report has no series (older "
        "sdcscan), bars show the reduced value, rings the first reading and dots the last."
    )
    return section("Telemetry", body, note=note, anchor="telemetry")


def _series(s: Mapping[str, object]) -> tuple[float, list[float | None]] | None:
    """(seconds between points, points) of a metric's series, None when it has fewer than two."""
    series = _dict(s.get("series"))
    every, points = _num(series.get("every_s")), series.get("points")
    if every is None or every <= 0 or not isinstance(points, list) or len(points) < 2:
        return None
    return every, [_num(p) for p in points[:MAX_SERIES_POINTS]]


def _series_chart(metric: str, reduce: str, rows: list[tuple[str, Mapping[str, object]]]) -> str:
    """A gauge over the run, one line per scope (the first PALETTE in colour, the rest grey)."""
    drawn = [(scope, got) for scope, s in rows if (got := _series(s)) is not None][:MAX_COLUMNS]
    values = [v for _, (_, pts) in drawn for v in pts if v is not None]
    if not values:
        return ""
    lo, hi = min(0.0, min(values)), max(values) * 1.1 or 1.0
    end = max(every * (len(pts) - 1) for _, (every, pts) in drawn)
    chart = Chart(f"{metric} ({reduce} per point) over the run", height=220, width=HALF, bottom=54)
    xs, ys = Scale(0.0, end or 1.0, chart.x0, chart.x1), Scale(lo, hi, chart.y1, chart.y0)
    chart.x_axis(xs, nice_ticks(0.0, end or 1.0, 5), fmt_num, "seconds into the run")
    chart.y_axis(ys, nice_ticks(lo, hi, 4), fmt_num, f"{metric} ({reduce})")
    for k, (scope, (every, pts)) in enumerate(drawn):
        cls = f"c{k}" if len(drawn) <= PALETTE else "s-quiet"
        chart.series(xs, ys, [(every * i, v) for i, v in enumerate(pts)], cls, scope)
    if len(drawn) <= PALETTE:
        chart.legend([(f"c{k}", scope) for k, (scope, _) in enumerate(drawn)])
    return chart.svg() if chart.marks else ""


def _gauge_chart(metric: str, reduce: str, rows: list[tuple[str, Mapping[str, object]]]) -> str:
    rows = [
        (scope, s)
        for scope, s in rows
        if any(_num(s.get(k)) is not None for k in ("value", "before", "after"))
    ]
    if not rows:
        return ""
    shown = rows[:MAX_COLUMNS]
    values = [v for _, s in shown for k in ("value", "before", "after") if (v := _num(s.get(k))) is not None]
    lo, hi = min(0.0, min(values)), max(values) * 1.1 or 1.0
    chart = Chart(f"{metric} ({reduce} over the run) per scope", height=220, width=HALF, bottom=54)
    xs = Scale(0.0, float(len(shown)), chart.x0, chart.x1)
    ys = Scale(lo, hi, chart.y1, chart.y0)
    chart.y_axis(ys, nice_ticks(lo, hi, 4), fmt_num, f"{metric} ({reduce})")
    step = xs(1.0) - xs(0.0)
    labels = max(1, math.ceil(len(shown) / 24))
    for k, (scope, s) in enumerate(shown):
        value, before, after = (_num(s.get(key)) for key in ("value", "before", "after"))
        x = xs(k + 0.5)
        tip = f"{scope}: {reduce} {fmt_num(value)}, first {fmt_num(before)}, last {fmt_num(after)}"
        if value is not None:
            chart.rect(
                x - step * 0.35, ys(max(value, lo)), step * 0.7, ys(lo) - ys(max(value, lo)), "t-value", tip
            )
        if before is not None and len(shown) <= 64:
            chart.circle(x, ys(before), 3.0, "t-before", tip)
        if after is not None and len(shown) <= 64:
            chart.circle(x, ys(after), 2.5, "t-after", tip)
        if k % labels == 0:
            chart.text(x, chart.y1 + 14, scope, "tick", anchor="middle")
    chart.hrule(chart.y1, "axis")
    if len(rows) > MAX_COLUMNS:
        chart.text(
            chart.x1, chart.y1 + 30, f"first {MAX_COLUMNS} of {len(rows)} scopes", "note", anchor="end"
        )
    return chart.svg() if chart.marks else ""


def _counter_row(metric: str, reduce: str, scope: str, s: Mapping[str, object]) -> list[str]:
    first, last = _num(s.get("before")), _num(s.get("after"))
    delta = _num(s.get("delta"))
    if reduce == "or":  # throttle reasons: a bit mask
        shown = [f"{int(v):#x}" if v is not None else "-" for v in (first, last, _num(s.get("value")))]
        return [esc(metric), esc(scope), esc(f"any of {shown[2]}"), esc(shown[0]), esc(shown[1]), "-"]
    change = "-" if delta is None else f"{delta:+g}"
    return [esc(metric), esc(scope), esc(reduce or "-"), esc(fmt_num(first)), esc(fmt_num(last)), esc(change)]


# -- re-tests --------------------------------------------------------------------------------------


def retest_section(report: Report) -> str:
    rows: list[list[str]] = []
    counts: dict[str, int] = {}
    for u in sorted(report["units"], key=lambda u: unit_order(u["id"])):
        retest = _dict(u.get("retest"))
        for k, v in _dict(retest.get("counts")).items():
            if (n := _num(v)) is not None:
                counts[k] = counts.get(k, 0) + int(n)
        cases = retest.get("cases")
        for c in cases if isinstance(cases, list) else []:
            c = _dict(c)
            peers = c.get("peers")
            rows.append(
                [
                    esc(u["id"]),
                    esc(fmt_num(_num(c.get("index")), 12)),
                    esc(_word(c.get("workload"))),
                    esc(_word(c.get("evidence"))),
                    badge(_word(c.get("classification")) or "untested", "k"),
                    esc(f"{fmt_num(_num(c.get('reproduced')))} of {fmt_num(_num(c.get('reruns')))}"),
                    esc(", ".join(p for p in peers if isinstance(p, str)) if isinstance(peers, list) else ""),
                    esc(fmt_num(_num(c.get("peer_failures")))),
                ]
            )
    if not rows:
        return section("Re-tests", '<p class="note">No case failed, so none was re-run.</p>', anchor="retest")
    summary = facts(sorted((k, v) for k, v in counts.items() if v))
    headers = ["unit", "case", "workload", "evidence", "class", "reproduced", "peers", "peer failures"]
    note = (
        "Each failing case re-run on its unit and on a peer: persistent (fails again on the unit), transient "
        "(did not reproduce), case (fails everywhere: software, not the unit)."
    )
    return section("Re-tests", summary + table(headers, rows, numeric=(1, 7)), note=note, anchor="retest")


# -- the kernel log (sentinel) ---------------------------------------------------------------------


def sentinel_section(report: Report) -> str:
    s = _dict(report.get("sentinel"))
    if not s:
        return section(
            "Kernel log", '<p class="note">The report holds no kernel-log scan.</p>', anchor="sentinel"
        )
    stats = _dict(s.get("stats"))
    sources = s.get("sources")
    head = facts(
        [
            ("window", f"{_word(s.get('since')) or '?'} .. {_word(s.get('until')) or '?'}"),
            (
                "sources",
                ", ".join(x for x in sources if isinstance(x, str)) if isinstance(sources, list) else "-",
            ),
            ("lines", fmt_num(_num(stats.get("lines")), 12)),
            ("events", fmt_num(_num(stats.get("events")), 12)),
            *[(name, fmt_num(_num(_dict(s.get("host_counts")).get(kind)), 12)) for kind, name in EVENT_KINDS],
        ]
    )
    body = head + _events_chart(_dict(s.get("units")))
    outliers = s.get("outliers")
    rows = [
        [esc(_word(o.get("unit"))), esc(fmt_num(_num(o.get("programs")), 12)), esc(fmt_num(_num(o.get("expected")))),
         esc(f"{_num(o.get('p_value')) or 0:.2g}")]
        for o in (_dict(x) for x in (outliers if isinstance(outliers, list) else []))
    ]  # fmt: skip
    if rows:
        body += "<h3>Outlier cores</h3>" + table(
            ["unit", "programs crashed", "expected", "p-value"], rows, numeric=(1, 2, 3)
        )
    notes = s.get("notes")
    if isinstance(notes, list):
        body += (
            "<ul>"
            + "".join(f'<li class="muted">{esc(n)}</li>' for n in notes if isinstance(n, str))
            + "</ul>"
        )
    note = "What the kernel logged during the run's window, per unit: evidence beside the tests; it never changes the verdict."
    return section("Kernel log", body, note=note, anchor="sentinel")


def _events_chart(units: Mapping[str, object]) -> str:
    tallies = []
    for unit, t in units.items():
        counts = _dict(_dict(t).get("counts"))
        row = [(kind, int(_num(counts.get(kind)) or 0)) for kind, _ in EVENT_KINDS]
        if sum(n for _, n in row) > 0:
            tallies.append((unit, row))
    if not tallies:
        return '<p class="note">No unit has a kernel-log event in the window.</p>'
    tallies = sorted(
        sorted(tallies, key=lambda t: -sum(n for _, n in t[1]))[:MAX_EVENT_UNITS],
        key=lambda t: unit_order(t[0]),
    )
    hi = max(sum(n for _, n in row) for _, row in tallies) * 1.1
    chart = Chart("Kernel-log events per unit", height=220, bottom=54)
    xs = Scale(0.0, float(len(tallies)), chart.x0, chart.x1)
    ys = Scale(0.0, hi, chart.y1, chart.y0)
    chart.y_axis(ys, nice_ticks(0.0, hi, 4), fmt_num, "events")
    step = xs(1.0) - xs(0.0)
    for k, (unit, row) in enumerate(tallies):
        chart.stack(
            xs(k + 0.15), step * 0.7, ys, [(n, f"ev-{kind}", f"{unit}: {n} {kind}") for kind, n in row]
        )
        chart.text(xs(k + 0.5), chart.y1 + 14, unit, "tick", anchor="middle")
    chart.legend([(f"ev-{kind}", name) for kind, name in EVENT_KINDS])
    return chart.svg()


# -- mismatching cases and errors ------------------------------------------------------------------


def mismatches_section(report: Report) -> str:
    found = report.get("mismatches") or []
    disputes = report.get("disputes") or []
    if not found and not disputes:
        return ""
    body = ""
    if found:
        rows = [
            [esc(m["unit"]), esc(m["index"]), esc(m["workload"]), esc(m["check"]), f"<code>{esc(m['where'])}</code>",
             f"<code>{esc(m['expected'])}</code>", f"<code>{esc(m['actual'])}</code>", f"<code>{esc(m.get('mask') or '')}</code>"]
            for m in found
        ]  # fmt: skip
        body += table(
            ["unit", "case", "workload", "check", "where", "expected", "actual", "XOR mask"],
            rows,
            numeric=(1,),
        )
    if disputes:
        rows = [
            [esc(d.get("index", "-")), esc(d["workload"]), esc(d.get("cohort", "")),
             esc(", ".join(f"{u}: {dg or '-'}" for u, dg in sorted(d["digests"].items(), key=lambda kv: unit_order(kv[0])))),
             esc(d.get("majority") or "none")]
            for d in disputes
        ]  # fmt: skip
        body += "<h3>Cases whose digests differ within a cohort</h3>" + table(
            ["case", "workload", "cohort", "digests", "majority"], rows
        )
    return section(
        "Mismatching cases", body, note="Every check that fired, as the report lists it.", anchor="mismatches"
    )


def errors_section(report: Report) -> str:
    errors = report.get("errors") or []
    if not errors:
        return ""
    rows = [
        [
            esc(e.get("unit", "")),
            esc(e.get("index", "")),
            esc(e.get("workload", "")),
            f"<code>{esc(e.get('error') or '')}</code>",
        ]
        for e in errors
        if isinstance(e, dict)
    ]
    return section(
        "Cases that raised", table(["unit", "case", "workload", "error"], rows, numeric=(1,)), anchor="errors"
    )
