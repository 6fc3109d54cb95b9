"""The fleet page (`sdcscan compare ... --html FILE`): a comparison of many hosts' reports, as a person
triages it.

Top to bottom: what was compared and the findings by kind, each cohort's throughput distribution with
its slow units marked, hosts by the age of their newest screening, where failing units cluster (model,
hostname prefix, day), then each finding in the words of `compare`'s table (`render.fleet.describe`),
the partition groups and the inputs not judged. Built from the `FleetSummary` that `compare` returns:
its findings and counts (what the JSON holds) and its `overview` (`fleet.overview`: bounded histograms
and bar lists), so the page's size does not grow with the fleet. Tables stop at a fixed number of rows
and say how many more the JSON holds.
"""

from __future__ import annotations

from sdcscan.fleet.findings import KINDS
from sdcscan.fleet.overview import AgeHistogram, Clusters, Distribution, FleetOverview
from sdcscan.fleet.summary import FleetSummary
from sdcscan.render.fleet import describe
from sdcscan.render.html.page import badge, document, facts, section, table
from sdcscan.render.html.svg import HALF, Chart, Scale, esc, fmt_num, fmt_pct, nice_ticks

MAX_FINDINGS = 300  # rows of the findings table, most severe first; the JSON holds every one
MAX_ROWS = 50  # rows of the smaller tables (groups, skipped, superseded)
MAX_LABEL = 44  # characters of a bar's label drawn; the tooltip holds it whole
EXIT_WORDS = {0: "pass", 1: "fail", 3: "undecided"}
KIND_LEGEND = [("k-divergent", "divergent"), ("k-invariant", "invariant"), ("k-slow", "slow")]


def fleet_page(summary: FleetSummary, *, source: str) -> str:
    """The whole HTML page of a comparison; `source` says what was compared (shown in the footer)."""
    ov = summary.overview
    # The findings lead: what kind of trouble, then each row to act on; the pictures of where below.
    body = [
        section("Findings", _kind_counts(summary), note=_findings_note(summary), anchor="findings"),
        _finding_rows(summary),
    ]
    if ov is None:
        body.append(section("Pictures", '<p class="note">Computed only by compare --html.</p>'))
    else:
        body += [_distributions(ov), _ages(ov, summary), _clusters(ov)]
    body += [_groups(summary), _skipped(summary)]
    return document("sdcscan compare", _header(summary), body, source)


def _header(summary: FleetSummary) -> str:
    c, o = summary.counts, summary.options
    word = EXIT_WORDS.get(summary.exit_code, "invalid")
    items: list[tuple[str, object]] = [
        ("reports", c.get("reports", 0)),
        ("hosts", c.get("hosts", 0)),
        ("units", c.get("units", 0)),
        ("plans", c.get("plans", 0)),
        ("comparison groups", c.get("comparison_groups", 0)),
        ("cases compared", c.get("cases_compared", 0)),
        ("superseded", c.get("superseded", 0)),
        ("skipped", c.get("skipped", 0)),
        ("stale after", f"{o.get('stale_days')} days"),
        ("slow", f"z {o.get('slow_z')}, drop {o.get('slow_drop')}"),
    ]
    return (
        f'<h1>Fleet comparison {badge(word, "v")} <span class="muted">exit {summary.exit_code}</span></h1>'
        + facts(items)
    )


# -- findings --------------------------------------------------------------------------------------


def _findings_note(summary: FleetSummary) -> str:
    c = summary.counts
    found = [f"{c[k]} {k}" for k in KINDS if c.get(k)]
    return (
        ("Findings: " + ", ".join(found) + ".") if found else "No finding: every unit agrees with its cohort."
    )


def _finding_rows(summary: FleetSummary) -> str:
    """Every finding (the first MAX_FINDINGS, most severe first), in the words of compare's table."""
    if not summary.findings:
        return ""
    shown = summary.findings[:MAX_FINDINGS]
    rows = [[esc(f.host), esc(f.unit or "-"), badge(f.kind, "k"), esc(describe(f))] for f in shown]
    # A kind sorts by its severity (its place in KINDS), as compare orders them, not by its name.
    severity = [
        [None, None, str(KINDS.index(f.kind) if f.kind in KINDS else len(KINDS)), None] for f in shown
    ]
    body = table(
        ["host", "unit", "kind", "evidence"],
        rows,
        total=len(summary.findings),
        limit=MAX_FINDINGS,
        sort_keys=severity,
        sortable=True,
    )
    note = (
        "Most severe first, as compare's table lists them. Click a heading to sort by it (kind sorts by "
        "severity); type in the field to show only the rows holding the text."
    )
    return section("Each finding", body, note=note, anchor="each")


def _kind_counts(summary: FleetSummary) -> str:
    kinds = [(k, summary.counts.get(k, 0)) for k in KINDS if summary.counts.get(k)]
    if not kinds:
        return ""
    chart = Chart("Findings by kind", height=26 * len(kinds) + 44, left=110, top=8, bottom=36)
    hi = max(n for _, n in kinds) * 1.1
    xs = Scale(0.0, hi, chart.x0, chart.x1)
    for k, (kind, n) in enumerate(kinds):
        y = chart.y0 + k * 26
        chart.rect(xs(0.0), y + 3, xs(n) - xs(0.0), 20, f"k-{kind}", f"{n} {kind}")
        chart.text(xs(n) + 6, y + 17, str(n), "note")
    chart.band_labels([(chart.y0 + k * 26 + 13, kind) for k, (kind, _) in enumerate(kinds)])
    chart.x_axis(xs, nice_ticks(0.0, hi, 5), fmt_num, "findings")
    return chart.svg()


# -- throughput distributions ----------------------------------------------------------------------


def _distributions(ov: FleetOverview) -> str:
    if not ov.distributions:
        return section(
            "Throughput by cohort", '<p class="note">No report carries throughput.</p>', anchor="throughput"
        )
    charts = "".join(_histogram(d) for d in ov.distributions)
    more = (
        f'<p class="note">{ov.distributions_left_out} more (profile, cohort, workload) groups not drawn.</p>'
        if ov.distributions_left_out
        else ""
    )
    note = (
        "Each unit's throughput in its host's newest report, per profile, cohort and workload (units on a "
        "log scale, so a lone unit shows). Dashed: the healthy median, and the slow threshold compare "
        "judges by (--slow-z and --slow-drop); red triangles: the units compare names slow."
    )
    return section(
        "Throughput by cohort", f'<div class="grid2">{charts}</div>{more}', note=note, anchor="throughput"
    )


def _histogram(d: Distribution) -> str:
    chart = Chart(
        f"{d.workload}: throughput of {d.units} units, cohort {d.cohort}, profile {d.profile}",
        height=240,
        width=HALF,
        top=30,
    )
    hi_x = d.lo + d.width * len(d.counts)
    xs = Scale(d.lo, hi_x, chart.x0, chart.x1)
    top = max(d.counts) if d.counts else 1
    ys = Scale(0.0, float(top), chart.y1, chart.y0 + 14, log=True)
    step = xs(d.lo + d.width) - xs(d.lo)
    for i, n in enumerate(d.counts):
        if n:
            x = d.lo + i * d.width
            below = d.slow_below is not None and x + d.width <= d.slow_below
            cls = "bar-slow" if below else "bar-healthy"
            tip = f"{n} unit(s) at {fmt_num(x)}-{fmt_num(x + d.width)} {d.value_unit}/s"
            chart.rect(xs(x) + 0.3, ys(n), max(step - 0.6, 0.8), ys(0.0) - ys(n), cls, tip)
    chart.x_axis(xs, nice_ticks(d.lo, hi_x, 6), fmt_num, f"{d.value_unit}/s")
    chart.y_axis(
        ys, [t for t in (1, 10, 100, 1000, 10_000, 100_000, 1_000_000) if t <= top], fmt_num, "units"
    )
    if d.median is not None:
        chart.rule(xs(d.median), "median", f"median {fmt_num(d.median)}")
    if d.slow_below is not None:
        chart.rule(xs(d.slow_below), "cut", "slow below", anchor="end")
    for m in d.slow:
        x = min(max(m.value, d.lo), hi_x)
        chart.marker(
            xs(x), chart.y1 - 2, "m-slow", f"{m.host} {m.unit}: {fmt_num(m.value)} {d.value_unit}/s (slow)"
        )
    extra = [f"{d.clipped} unit(s) beyond the range counted in the edge bins"] if d.clipped else []
    if d.slow_not_marked:
        extra.append(f"{d.slow_not_marked} more slow unit(s) not marked")
    if d.median is None:
        extra.append("too few units to judge speed")
    if extra:
        chart.text(chart.x0, 12, "; ".join(extra), "note")
    return f"<div><h3>{esc(d.workload)} · {esc(d.cohort)} · {esc(d.profile)}</h3>{chart.svg()}</div>"


# -- coverage by age -------------------------------------------------------------------------------


def _ages(ov: FleetOverview, summary: FleetSummary) -> str:
    a = ov.ages
    if a is None or not a.hosts:
        return section("Coverage by age", '<p class="note">No host reported.</p>', anchor="coverage")
    screened = sum(a.counts) + a.older
    within = [
        (f"within {days:g} d", fmt_pct(_share_within(a, days) / max(a.hosts, 1)))
        for days in (1.0, 7.0, 30.0, a.stale_days)
    ]
    items: list[tuple[str, object]] = [("hosts reported", a.hosts), ("screened", screened), *within]
    items += [("tested nothing", a.untested), ("clock ahead", a.ahead)]
    if summary.counts.get("missing") is not None and summary.options.get("hosts_listed") is not None:
        items += [
            ("listed, missing", summary.counts.get("missing", 0)),
            ("listed, stale", summary.counts.get("stale", 0)),
        ]
    note = (
        "Hosts by the age of their newest report that tested something (compare's coverage rule), "
        f"in bins of {a.width_days:g} day(s); the dashed line is --stale: hosts right of it are stale."
    )
    return section(
        "Coverage and staleness by age", facts(items) + _age_chart(a), note=note, anchor="coverage"
    )


def _share_within(a: AgeHistogram, days: float) -> int:
    full = int(days // a.width_days)
    return sum(a.counts[:full])


def _age_chart(a: AgeHistogram) -> str:
    bins = len(a.counts)
    span = bins * a.width_days
    chart = Chart("Hosts by age of their newest screening", height=240)
    xs = Scale(0.0, span, chart.x0, chart.x1)
    top = max([*a.counts, a.older, 1]) * 1.1
    ys = Scale(0.0, top, chart.y1, chart.y0)
    for i, n in enumerate(a.counts):
        if n:
            start = i * a.width_days
            cls = "age-stale" if start >= a.stale_days else "age-fresh"
            tip = f"{n} host(s) last screened {start:g}-{start + a.width_days:g} days ago"
            chart.rect(
                xs(start) + 0.5, ys(n), max(xs(a.width_days) - xs(0.0) - 1.0, 1.0), ys(0.0) - ys(n), cls, tip
            )
    chart.x_axis(xs, nice_ticks(0.0, span, 8), lambda t: f"{t:g}", "days since the host's newest screening")
    chart.y_axis(ys, nice_ticks(0.0, top, 4), fmt_num, "hosts")
    if a.stale_days <= span:
        chart.rule(xs(a.stale_days), "stale-line", f"stale after {a.stale_days:g} d")
    if a.older:
        chart.text(
            chart.x1, chart.y0 + 24, f"{a.older} host(s) older than {span:g} days", "note", anchor="end"
        )
    chart.legend([("age-fresh", "fresh"), ("age-stale", "stale")])
    return chart.svg() if chart.marks else '<p class="note">No host has a report that tested something.</p>'


# -- where failing units cluster -------------------------------------------------------------------


def _clusters(ov: FleetOverview) -> str:
    if not ov.failing_units:
        return section(
            "Where failing units cluster",
            '<p class="note">No unit is divergent, invariant or slow.</p>',
            anchor="clusters",
        )
    charts = "".join(_cluster_chart(c) for c in ov.clusters if c.bars)
    note = (
        f"The units named divergent, invariant or slow ({ov.failing_units}; a unit named twice counts in each "
        "kind), grouped three ways: by the model of their cohort, by hostname prefix, by the day of the report "
        "that found them. The black tick is how many a group would hold if they were spread evenly over the "
        "fleet (by its share of units, hosts or reports): a bar far beyond its tick is a cluster."
    )
    return section("Where failing units cluster", charts, note=note, anchor="clusters")


def _cluster_chart(c: Clusters) -> str:
    if c.by == "day":
        return f"<h3>By day of the report</h3>{_day_chart(c)}"
    bars = c.bars
    chart = Chart(f"Failing units by {c.by}", height=24 * len(bars) + 64, left=300, top=24)
    hi = max(max(b.units, b.expected) for b in bars) * 1.15 or 1.0
    xs = Scale(0.0, hi, chart.x0, chart.x1)
    labels = []
    for k, b in enumerate(bars):
        y = chart.y0 + k * 24
        x = 0.0
        for kind, n in b.units_by_kind:
            chart.rect(
                xs(x),
                y + 3,
                xs(x + n) - xs(x),
                18,
                f"k-{kind}",
                f"{b.label}: {n} {kind} of {b.basis} {c.basis}",
            )
            x += n
        ex = xs(b.expected)
        chart.parts.append(
            f'<line class="expected" x1="{ex:.1f}" y1="{y + 1:.1f}" x2="{ex:.1f}" y2="{y + 23:.1f}"/>'
        )
        chart.text(max(xs(x), ex) + 6, y + 16, f"{b.units} of {b.basis} {c.basis}", "note")
        labels.append((y + 12, b.label if len(b.label) <= MAX_LABEL else b.label[: MAX_LABEL - 1] + "…"))
    chart.band_labels(labels)
    chart.x_axis(xs, nice_ticks(0.0, hi, 5), fmt_num, "failing units")
    chart.legend(KIND_LEGEND)
    other = f'<p class="note">{c.other} more in other groups.</p>' if c.other else ""
    return f"<h3>By {esc(c.by)}</h3>{chart.svg()}{other}"


def _day_chart(c: Clusters) -> str:
    bars = c.bars
    chart = Chart("Failing units by day of the report", height=250, bottom=48)
    xs = Scale(0.0, float(len(bars)), chart.x0, chart.x1)
    hi = max(max(b.units, b.expected) for b in bars) * 1.15 or 1.0
    ys = Scale(0.0, hi, chart.y1, chart.y0)
    step = xs(1.0) - xs(0.0)
    every = max(1, len(bars) // 10)
    for k, b in enumerate(bars):
        parts = [
            (n, f"k-{kind}", f"{b.label}: {n} {kind} of {b.basis} {c.basis}") for kind, n in b.units_by_kind
        ]
        chart.stack(xs(k + 0.15), step * 0.7, ys, parts)
        if b.basis:
            ey = ys(b.expected)
            chart.parts.append(
                f'<line class="expected" x1="{xs(k + 0.1):.1f}" y1="{ey:.1f}" x2="{xs(k + 0.9):.1f}" y2="{ey:.1f}"/>'
            )
        if k % every == 0:
            chart.text(xs(k + 0.5), chart.y1 + 14, b.label, "tick", anchor="middle")
    chart.y_axis(ys, nice_ticks(0.0, hi, 4), fmt_num, "failing units")
    chart.legend(KIND_LEGEND)
    if not chart.marks:  # every failing unit's report is older than the days drawn
        return (
            f'<p class="note">No failing unit in the {len(bars)} newest days; {c.other} on earlier days.</p>'
        )
    other = f'<p class="note">{c.other} more on earlier days.</p>' if c.other else ""
    return chart.svg() + other


# -- groups, skipped, superseded -------------------------------------------------------------------


def _groups(summary: FleetSummary) -> str:
    if not summary.groups:
        return ""
    rows = [
        [esc(g["id"]), esc(g["cohort"]), esc(g["units"]), esc(g["hosts"]), esc(g["shared_cases"]),
         esc("-" if g["first_shared_case"] is None else g["first_shared_case"]),
         esc(", ".join(f"{m['host']} {m['unit']}" for m in g["members"][:8]) + (" …" if len(g["members"]) > 8 else ""))]
        for g in summary.groups[:MAX_ROWS]
    ]  # fmt: skip
    headers = ["group", "cohort", "units", "hosts", "shared cases", "first", "members"]
    note = "Units (two or more) wrong in the same way: they share a wrong digest of a case."
    return section(
        "Partition groups", table(headers, rows, numeric=(2, 3, 4, 5), total=len(summary.groups)), note=note
    )


def _skipped(summary: FleetSummary) -> str:
    if not summary.skipped and not summary.superseded:
        return ""
    body = ""
    if summary.skipped:
        rows = [[f"<code>{esc(s.path)}</code>", esc(s.reason)] for s in summary.skipped[:MAX_ROWS]]
        body += "<h3>Skipped inputs</h3>" + table(["input", "why"], rows, total=len(summary.skipped))
    if summary.superseded:
        rows = [
            [esc(s["host"]), esc(s["run"]), esc(s["ended_at"]), esc(s["superseded_by"]["run"])]
            for s in summary.superseded[:MAX_ROWS]
        ]
        body += "<h3>Superseded reports</h3>" + table(
            ["host", "run", "ended", "replaced by"], rows, total=len(summary.superseded)
        )
    return section("Inputs not judged", body)
