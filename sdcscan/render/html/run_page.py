"""The run page (`sdcscan report REPORT --html FILE`): one report, as a person reads it.

Top to bottom: the verdict of each unit, the findings, each unit's throughput and efficiency over the
run, where its case outcomes fell in time, then the evidence beside the verdict (telemetry, re-tests,
the kernel log) and the mismatching cases. Every number comes from the report (a validated `Report`);
fields the validator does not check (telemetry, re-test, sentinel) are read defensively
(`run_evidence`).
"""

from __future__ import annotations

import math

from sdcscan import proof
from sdcscan.parts import describe
from sdcscan.render.html.page import badge, document, facts, section, table
from sdcscan.render.html.run_evidence import (
    errors_section,
    mismatches_section,
    retest_section,
    sentinel_section,
    telemetry_section,
)
from sdcscan.render.html.run_series import (
    OutcomeStrip,
    WorkloadSeries,
    ordered_units,
    outcome_strip,
    throughput_series,
)
from sdcscan.render.html.svg import (
    HALF,
    Chart,
    Scale,
    esc,
    fmt_efficiency,
    fmt_num,
    fmt_pct,
    nice_ticks,
    pct_ticks,
)
from sdcscan.report.document import Report, Unit

PALETTE = 8  # up to this many units get a colour each; beyond, passing units are grey
GRID_COLUMNS = 16
MAX_LEGEND = 8
DOTS_UP_TO = 40  # bins of a throughput series up to which each point is marked


def run_page(report: Report, *, source: str) -> str:
    """The whole HTML page of one report; `source` names the file it came from (shown in the footer)."""
    units = ordered_units(report)
    colours = _colours(units)
    body = [
        section("Units", _verdict_grid(units) + _units_table(units), note=_units_note(units), anchor="units"),
        section("Findings", _findings(report), anchor="findings"),
        _throughput_section(report, colours),
        _outcomes_section(report),
        _proof_section(units),
        telemetry_section(report),
        retest_section(report),
        sentinel_section(report),
        mismatches_section(report),
        errors_section(report),
    ]
    return document(
        f"sdcscan run {report['host']['hostname']}: {report['verdict']}", _header(report), body, source
    )


def _header(report: Report) -> str:
    run, host = report["run"], report["host"]
    items: list[tuple[str, object]] = [
        ("run", run["id"]),
        ("profile", run["profile"]["name"]),
        ("seed", run["seed"]),
        ("budget", f"{run['budget_s']:g} s"),
        ("ran", f"{run['duration_s']:.0f} s"),
        ("started", run.get("started_at") or "-"),
        ("ended", run.get("ended_at") or "-"),
        ("units", len(report["units"])),
        ("cpu", host.get("cpu_model") or "-"),
        ("sdcscan", report["tool"]["version"]),
        ("software", _software(report)),
    ]
    if run.get("interrupted_by"):
        items.append(("interrupted by", run.get("interrupted_by")))
    return f"<h1>{esc(host['hostname'])} {badge(report['verdict'], 'v')}</h1>" + facts(items)


def _software(report: Report) -> str:
    """The stack the run computed with, as the report records it: Python, torch, CUDA, the CPU's ISA."""
    found = report.get("software")
    sw = found if isinstance(found, dict) else {}
    parts = [f"{name} {sw[key]}" for key, name in (("python", "Python"), ("torch", "torch"), ("cuda", "CUDA"))
             if sw.get(key)]  # fmt: skip
    if sw.get("cpu_capability"):
        parts.append(f"ISA {sw['cpu_capability']}")
    return ", ".join(str(p) for p in parts) or "-"


def _colours(units: list[Unit]) -> dict[str, str]:
    """Unit -> its line class: a colour each on a small host; on a large one grey unless it did not pass."""
    if len(units) <= PALETTE:
        return {u["id"]: f"c{k}" for k, u in enumerate(units)}
    return {u["id"]: "s-quiet" if u["verdict"] == "pass" else f"s-{u['verdict']}" for u in units}


def _legend(units: list[Unit], colours: dict[str, str]) -> list[tuple[str, str]]:
    if len(units) <= PALETTE:
        return [(colours[u["id"]], u["id"]) for u in units]
    odd = [u for u in units if u["verdict"] != "pass"]
    items = [("s-quiet", f"pass ({len(units) - len(odd)} units)")]
    return items + [(colours[u["id"]], f"{u['id']} {u['verdict']}") for u in odd[:MAX_LEGEND]]


# -- units -----------------------------------------------------------------------------------------


def _units_note(units: list[Unit]) -> str:
    counts: dict[str, int] = {}
    for u in units:
        counts[u["verdict"]] = counts.get(u["verdict"], 0) + 1
    return "Verdict of each unit: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) + "."


def _verdict_grid(units: list[Unit]) -> str:
    if not units:
        return '<p class="note">The report holds no unit.</p>'
    cols = GRID_COLUMNS  # fixed: a cell is as wide on a 2-unit host as on a 192-core one
    rows = math.ceil(len(units) / cols)
    chart = Chart("Verdict of each unit", height=rows * 34 + 8, left=4, right=4, top=4, bottom=4)
    w = (chart.x1 - chart.x0) / cols
    for k, u in enumerate(units):
        x, y = chart.x0 + (k % cols) * w, chart.y0 + (k // cols) * 34
        why = f": {u['reason']}" if u.get("reason") else ""
        chart.rect(x + 1, y + 1, w - 2, 30, f"s-{u['verdict']}", f"{u['id']} {u['verdict']}{why}")
        chart.text(x + w / 2, y + 20, u["id"], "cell-label", anchor="middle")
    return chart.svg()


def _units_table(units: list[Unit]) -> str:
    rows = []
    for u in units:
        retest = u.get("retest")
        klass = retest.get("classification") if isinstance(retest, dict) else None
        eff = [(w, t.get("efficiency")) for w, t in sorted((u.get("throughput") or {}).items())]
        eff_s = ", ".join(f"{w} {fmt_efficiency(e)}" for w, e in eff if isinstance(e, int | float)) or "-"
        rows.append(
            [
                esc(u["id"]),
                esc(u.get("model") or "-"),
                esc(describe(u["kind"], u.get("part") or {}) or "-"),
                badge(u["verdict"], "v"),
                esc(u["cases_run"]),
                esc(u["mismatches"]),
                esc("-" if u.get("first_bad_case") is None else u.get("first_bad_case")),
                esc(klass or "-"),
                esc(eff_s),
                esc(u.get("reason") or ""),
            ]
        )
    headers = [
        "unit",
        "model",
        "part",
        "verdict",
        "cases",
        "mismatches",
        "first bad case",
        "retest",
        "efficiency",
        "reason",
    ]
    return table(headers, rows, numeric=(4, 5, 6))


def _findings(report: Report) -> str:
    found = report["findings"]
    if not found:
        return '<p class="note">No finding: nothing to act on.</p>'
    items = []
    for f in found:
        unit = f" <code>{esc(f['unit'])}</code>" if f.get("unit") else ""
        nxt = f'<div class="next">Next: {esc(f["next"])}</div>' if f.get("next") else ""
        items.append(f"<li>{badge(f['kind'], 'k')}{unit} {esc(f['message'])}{nxt}</li>")
    return f'<ul class="findings">{"".join(items)}</ul>'


def _proof_section(units: list[Unit]) -> str:
    """What each unit's checks covered and the rate of silent corruption its pass bounds (`proof`)."""
    rows = []
    for u in units:
        words = [
            f"{w}: {proof.sentence(c['checked_ops'], c['op'], c['evidence'], c['sdc_rate_bound'], u['verdict'], detection=c['detection'])}"
            for w, c in sorted((u.get("checked") or {}).items())
        ]
        if words:
            rows.append([esc(u["id"]), badge(u["verdict"], "v"), esc("; ".join(words))])
    if not rows:
        return section("What a pass proves", '<p class="note">The report records no checked operations.</p>')
    note = (
        "Per unit and workload: the operations its checks covered, and the rate of silent corruption per "
        "operation below which a pass puts it, at 95% confidence (the rule of three over the checked "
        "operations, each corruption caught at least at the workload's detection floor). Digests prove "
        "nothing alone: only once compared with peers or a golden."
    )
    return section(
        "What a pass proves", table(["unit", "verdict", "coverage"], rows), note=note, anchor="proof"
    )


# -- throughput and efficiency over time -----------------------------------------------------------


def _throughput_section(report: Report, colours: dict[str, str]) -> str:
    series = throughput_series(report)
    if not series:
        return section(
            "Throughput over time", '<p class="note">No unit finished a case.</p>', anchor="throughput"
        )
    units = ordered_units(report)
    legend = _legend(units, colours)
    charts = []
    for ws in series:
        charts.append(f"<h3>{esc(ws.workload)}</h3><div class=\"grid2\">{_rate_chart(ws, colours, legend, efficiency=False)}"
                      f"{_rate_chart(ws, colours, legend, efficiency=True)}</div>")  # fmt: skip
    note = (
        "Each unit's rate per workload over the run, in bins of its summed case seconds. The report keeps "
        "each case's seconds but not its ops, so a bin's rate is the workload's mean ops per case times the "
        "bin's cases over their seconds: exact over the run, an estimate per bin. Efficiency is that rate "
        "over the unit's own plain-op peak, measured at its start."
    )
    return section("Throughput and efficiency over time", "".join(charts), note=note, anchor="throughput")


def _rate_chart(
    ws: WorkloadSeries, colours: dict[str, str], legend: list[tuple[str, str]], *, efficiency: bool
) -> str:
    values: list[list[float | None]] = []
    for us in ws.units:
        if efficiency:
            values.append([None if r is None or us.peak is None else r / us.peak for r in us.rates])
        else:
            values.append(list(us.rates))
    flat = [v for vs in values for v in vs if v is not None]
    what = "efficiency" if efficiency else f"{ws.ops_unit}/s"
    if not flat:
        return (
            f'<p class="note">{esc(ws.workload)}: no {esc(what)} to draw (no plain-op peak was measured).</p>'
        )
    hi = max(flat) * 1.08
    chart = Chart(f"{ws.workload}: {what} of each unit over the run", height=250, width=HALF)
    span = ws.bin_s * len(ws.units[0].rates)
    xs = Scale(0.0, span, chart.x0, chart.x1)
    ys = Scale(0.0, hi, chart.y1, chart.y0)
    chart.x_axis(xs, nice_ticks(0.0, span, 6), lambda t: f"{t:g}", "seconds into the run (summed case time)")
    y_ticks = nice_ticks(0.0, hi, 5)
    chart.y_axis(ys, y_ticks, pct_ticks(y_ticks) if efficiency else fmt_num, what)
    # Grey lines first, so a failing unit's line is drawn over its passing peers.
    order = sorted(range(len(ws.units)), key=lambda k: colours.get(ws.units[k].unit) != "s-quiet")
    few = len(ws.units) <= PALETTE and len(ws.units[0].rates) <= DOTS_UP_TO
    fmt = fmt_pct if efficiency else fmt_num
    for k in order:
        us = ws.units[k]
        points = [((i + 0.5) * ws.bin_s, v) for i, v in enumerate(values[k])]
        mean = [v for v in values[k] if v is not None]
        label = f"{us.unit} ({us.verdict}): mean {fmt(sum(mean) / len(mean)) if mean else '-'}"
        chart.series(xs, ys, points, colours.get(us.unit, "s-quiet"), label, dots=few)
    chart.legend(legend)
    return chart.svg()


# -- case outcomes over time -----------------------------------------------------------------------


def _outcomes_section(report: Report) -> str:
    strip = outcome_strip(report)
    if not any(segs for _, _, segs in strip.rows) and not strip.stopped:
        return section(
            "Case outcomes over time", '<p class="note">No unit finished a case.</p>', anchor="outcomes"
        )
    note = (
        f"Each row is a unit, each cell {strip.bin_s:.3g} s of its cases; a cell shows its worst case: "
        "ok; disputed (its digest differs from its cohort's, or the cohort is split); mismatch (a check "
        "fired: SDC suspected); error (the workload raised). A black bar marks where an invalid unit "
        "stopped (a case that hung, a worker that died or never became ready), after its last outcome. "
        "Point at a cell for its cases."
    )
    return section("Case outcomes over time", _strip_chart(strip), note=note, anchor="outcomes")


def _strip_chart(strip: OutcomeStrip) -> str:
    row_h = 18.0 if len(strip.rows) <= 48 else max(4.0, 864.0 / len(strip.rows))
    chart = Chart(
        "Case outcomes of each unit over the run", height=int(row_h * len(strip.rows)) + 64, left=90, top=22
    )
    span = strip.bin_s * strip.bins
    xs = Scale(0.0, span, chart.x0, chart.x1)
    labels = []
    row_of = {unit: r for r, (unit, _, _) in enumerate(strip.rows)}
    for r, (unit, verdict, segments) in enumerate(strip.rows):
        y = chart.y0 + r * row_h
        if row_h >= 10 or r % max(1, int(10 / row_h)) == 0:
            labels.append((y + row_h / 2, unit))
        for s in segments:
            x0, x1 = xs(s.first * strip.bin_s), xs((s.last + 1) * strip.bin_s)
            bad = "; ".join(f"case {i} ({w})" for i, w in s.bad)
            tip = (
                f"{unit} ({verdict}): {s.cases} case(s) {s.first * strip.bin_s:.0f}-{(s.last + 1) * strip.bin_s:.0f} s, {s.status}"
                + (f": {bad}" if bad else "")
            )
            width = max(x1 - x0, 2.0 if s.status != "ok" else 0.5)  # a lone mismatch stays visible
            chart.rect(x0, y + 1, width, max(row_h - 2, 1.0), f"o-{s.status}", tip)
    for unit, at, why in strip.stopped:  # the case a unit stopped in has no outcome: marked where it ends
        y = chart.y0 + row_of[unit] * row_h
        tip = f"{unit} stopped after {at:.0f} s of cases: {why}"
        chart.rect(min(xs(at), chart.x1 - 3.0), y, 3.0, max(row_h, 1.0), "o-stopped", tip)
    chart.band_labels(labels)
    chart.x_axis(xs, nice_ticks(0.0, span, 8), lambda t: f"{t:g}", "seconds into the run (summed case time)")
    legend = [("o-ok", "ok"), ("o-disputed", "disputed"), ("o-mismatch", "mismatch"), ("o-error", "error")]
    chart.legend(legend + ([("o-stopped", "stopped (hung, died, not ready)")] if strip.stopped else []))
    return chart.svg()
