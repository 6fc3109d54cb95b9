"""The HTML pages without a browser: what they hold, that report text is only ever text, that nothing is
fetched, that a fleet's page does not grow with the fleet, and `--html` on `report` and `compare`.

The pages in a browser (console errors, every chart drawn, render time): tests/test_html_browser.py.
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sdcscan.cli import cli
from sdcscan.errors import ReportError
from sdcscan.fleet.compare import compare_files, summarize
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import Extractor
from sdcscan.fleet.overview import hostname_prefix
from sdcscan.fleet.reading import read_hosts
from sdcscan.fleet.summary import FleetSummary, Options
from sdcscan.render.html import fleet_page, run_page
from sdcscan.render.html import page as html_page
from sdcscan.report import load_report, validate_report
from sdcscan.timefmt import parse_iso_utc
from tests.helpers.reports import build_report, build_unit, make_report
from tests.helpers.scripts import load_script

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "report_v1.json"
BURNIN = DATA / "report_burnin.json"  # a real `sdcscan run -p burnin` with a fault injected on cpu:1
NOW = "2025-06-02T12:00:00Z"  # scripts/simulate_fleet.py's reference time
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)></style><a href="https://evil.example/">'
# Tags a page may hold: ours, and nothing a report could smuggle in (script, img, link, iframe, ...).
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "main", "footer", "section", "h1", "h2",
    "h3", "p", "div", "span", "ul", "li", "b", "code", "table", "thead", "tbody", "tr", "th", "td",
    "svg", "g", "line", "polyline", "rect", "circle", "path", "text", "input",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "charset", "http-equiv", "content", "name", "lang", "class", "id", "viewbox", "role",
    "preserveaspectratio", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height", "points",
    "d", "text-anchor", "transform", "type", "placeholder", "aria-label", "data-sort",
}  # fmt: skip


class _Structure(HTMLParser):
    """Every tag and attribute of a page, and the text of its <style> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.styles: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self._in_style = tag == "style"
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_style = self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)
        if self._in_script:
            self.scripts[-1] += data


def structure(page: str) -> _Structure:
    parsed = _Structure()
    parsed.feed(page)
    return parsed


def assert_inert(page: str) -> None:
    """Only our tags and attributes, one stylesheet with no url(), no script but our own sorting one (the
    one the policy's hash admits, on pages with a sortable table), nothing that fetches."""
    s = structure(page)
    assert s.tags - {"script"} <= ALLOWED_TAGS, s.tags - ALLOWED_TAGS
    assert s.attributes <= ALLOWED_ATTRIBUTES, s.attributes - ALLOWED_ATTRIBUTES
    assert len(s.styles) == 1 and "url(" not in s.styles[0] and "@import" not in s.styles[0]
    assert s.scripts == ([html_page.SCRIPT] if 'class="sortable"' in page else [])
    assert f"script-src 'sha256-{html_page.SCRIPT_HASH}'" in page and "unsafe-inline'; img" in page


def hostile_report() -> dict[str, Any]:
    """The recorded report with hostile text wherever the report has free text (still a valid report)."""
    doc: dict[str, Any] = json.loads(RECORDED.read_text())
    doc["host"]["hostname"] = HOSTILE
    doc["host"]["cpu_model"] = HOSTILE
    doc["run"]["id"] = HOSTILE
    doc["run"]["profile"]["name"] = HOSTILE
    unit = doc["units"][0]
    unit.update(model=HOSTILE, reason=HOSTILE, cohort=HOSTILE, notes=[HOSTILE])
    unit["cases"]["workload"] = [HOSTILE] * len(unit["cases"]["workload"])
    unit["cases"]["status"][3] = "mismatch"
    unit["throughput"] = {HOSTILE: {**next(iter(unit["throughput"].values())), "ops_unit": HOSTILE}}
    unit["retest"] = {"classification": HOSTILE, "counts": {HOSTILE: 1}, "cases": [{"workload": HOSTILE, "peers": [HOSTILE], "classification": HOSTILE}]}  # fmt: skip
    doc["findings"] = [{"kind": HOSTILE, "unit": HOSTILE, "message": HOSTILE, "next": HOSTILE}]
    doc["mismatches"] = [{"unit": "cpu:0", "index": 3, "workload": HOSTILE, "check": HOSTILE, "where": HOSTILE, "expected": HOSTILE, "actual": HOSTILE, "mask": HOSTILE}]  # fmt: skip
    doc["errors"] = [{"unit": HOSTILE, "index": 1, "workload": HOSTILE, "error": HOSTILE}]
    doc["telemetry"]["notes"] = [HOSTILE]
    doc["telemetry"]["sources"] = {HOSTILE: HOSTILE}
    doc["telemetry"]["units"]["cpu:0"][HOSTILE] = {"value": 1.0, "before": 2.0, "after": 3.0, "reduce": "max"}
    doc["sentinel"] = {
        "since": HOSTILE, "until": HOSTILE, "sources": [HOSTILE], "notes": [HOSTILE],
        "units": {HOSTILE: {"counts": {"segfault": 3}, "programs": HOSTILE}},
        "outliers": [{"unit": HOSTILE, "programs": 4, "expected": 0.5, "p_value": 0.001}],
    }  # fmt: skip
    return doc


# -- the run page ----------------------------------------------------------------------------------


def test_run_page_shows_every_section_of_a_recorded_burnin() -> None:
    """The burn-in's page names its units, its findings, each workload's rates, outcomes, telemetry, re-tests."""
    doc = load_report(BURNIN)
    page = run_page(doc, source=str(BURNIN))
    for heading in ("Units", "Findings", "Throughput and efficiency over time", "Case outcomes over time",
                    "Telemetry", "Re-tests", "Kernel log", "Mismatching cases"):  # fmt: skip
        assert f"<h2>{heading}</h2>" in page
    for unit in doc["units"]:
        assert f">{unit['id']}<" in page
        for workload in unit["throughput"]:
            assert f"<h3>{workload}</h3>" in page
    assert 'class="mark o-mismatch"' in page  # the failing case is drawn where it fell
    assert page.count('<svg class="chart"') >= 1 + 2 * len(doc["units"][0]["throughput"]) + 1


def test_run_page_has_no_reference_outside_the_file() -> None:
    """No http:// or https:// anywhere, no script, and a policy that forbids every request."""
    for path in (RECORDED, BURNIN):
        page = run_page(load_report(path), source=str(path))
        assert "http://" not in page and "https://" not in page
        assert "<script" not in page
        assert "default-src 'none'" in page
        assert_inert(page)


def test_hostile_report_text_is_only_text() -> None:
    """Markup in every free-text field of a report comes out escaped: no tag, attribute or script of its own."""
    doc = validate_report(hostile_report(), label="hostile")
    page = run_page(doc, source=HOSTILE)
    assert_inert(page)
    assert "<script>" not in page and "<img" not in page and 'href="' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;img src=x onerror=alert(2)&gt;") >= 10  # it was shown, many times, as text


def test_run_page_of_a_large_host_stays_small() -> None:
    """192 units of 5,000 cases each: every chart is binned, so the page stays far below the report's size."""
    units = [
        build_unit(f"cpu:{k}", digests=[f"{i:016x}" for i in range(5000)], seconds=0.2,
                   throughput={"train": {"ops_per_s": 1e9 * (1 + k % 3), "ops_unit": "flop", "cases": 2500, "seconds": 500.0},
                               "matmul_golden": {"ops_per_s": 3e9, "ops_unit": "flop", "cases": 2500, "seconds": 500.0}})
        for k in range(192)
    ]  # fmt: skip
    page = run_page(validate_report(build_report(units)), source="big.json")
    assert len(page.encode()) < 2_500_000
    assert_inert(page)


def test_run_page_of_a_report_without_cases_or_telemetry() -> None:
    """A unit that ran nothing, no telemetry, no sentinel: the page says so instead of drawing empty charts."""
    doc = validate_report(make_report(fail_unit=None, invalid_unit="cpu:1"))
    doc["units"] = [u for u in doc["units"] if u["id"] == "cpu:1"]
    page = run_page(doc, source="empty.json")
    assert "No unit finished a case." in page
    assert "The report holds no telemetry." in page
    assert_inert(page)


# -- the fleet page --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated fleet of 120 hosts with planted faults (scripts/simulate_fleet.py)."""
    out = tmp_path_factory.mktemp("fleet") / "f"
    load_script("simulate_fleet").main(
        ["--hosts", "120", "--units", "4", "--cases", "40", "--out", str(out), "--seed", "3"]
    )
    return out


def _fleet_summary(root: Path) -> FleetSummary:
    opts = Options(hosts=read_hosts(str(root / "hosts.txt")), now=parse_iso_utc(NOW), overview=True)
    return compare_files([str(root / "reports")], opts, jobs=1)


def test_fleet_page_draws_the_overview(small_fleet: Path) -> None:
    """Findings, a throughput histogram per cohort and workload, ages, and the three cluster charts."""
    summary = _fleet_summary(small_fleet)
    page = fleet_page(summary, source="reports/")
    assert summary.overview is not None and summary.overview.failing_units > 0
    for heading in (
        "Findings",
        "Throughput by cohort",
        "Coverage and staleness by age",
        "Where failing units cluster",
    ):
        assert f"<h2>{heading}</h2>" in page
    for d in summary.overview.distributions:
        assert f"<h3>{d.workload} · {d.cohort} · {d.profile}</h3>" in page
    assert 'class="mark m-slow"' in page  # the planted slow unit is marked on its cohort's histogram
    for f in summary.findings:
        assert f"<td>{f.host}</td>" in page
    assert "http://" not in page and "https://" not in page
    assert_inert(page)


def test_overview_stays_out_of_the_json(small_fleet: Path) -> None:
    """Asking for the overview changes nothing in the document compare --json writes."""
    opts = Options(hosts=read_hosts(str(small_fleet / "hosts.txt")), now=parse_iso_utc(NOW))
    plain = compare_files([str(small_fleet / "reports")], opts, jobs=1)
    assert plain.overview is None
    assert _fleet_summary(small_fleet).to_dict() == plain.to_dict()


def test_fleet_page_grows_sublinearly_in_hosts(tmp_path: Path) -> None:
    """Ten times the hosts make the page less than twice as large: histograms, bars and tables are bounded."""
    sizes = []
    for hosts in (60, 600):
        out = tmp_path / str(hosts)
        load_script("simulate_fleet").main(
            ["--hosts", str(hosts), "--units", "4", "--cases", "20", "--out", str(out), "--seed", "1"]
        )
        sizes.append(len(fleet_page(_fleet_summary(out), source="r/").encode()))
    assert sizes[1] < 2 * sizes[0], sizes


def test_fleet_page_tables_are_capped() -> None:
    """50,000 findings: the table shows the most severe few hundred and says how many more the JSON holds."""
    findings = tuple(
        FleetFinding(f"host{i:05d}", None, "missing", {"reason": "no usable report"}) for i in range(50_000)
    )
    summary = FleetSummary(findings, (), (), {"missing": 50_000, "hosts": 0}, {"stale_days": 60.0})
    page = fleet_page(summary, source="r/")
    assert len(page.encode()) < 300_000
    assert "49700 more not shown" in page


def test_fleet_page_escapes_hostile_host_names() -> None:
    """Host names, units and reasons in findings come from report files: shown as text only."""
    summary = FleetSummary(
        (FleetFinding(HOSTILE, HOSTILE, "invalid", {"run": HOSTILE, "reason": HOSTILE}),),
        (),
        (),
        {"invalid": 1},
        {"stale_days": HOSTILE},
    )
    page = fleet_page(summary, source=HOSTILE)
    assert_inert(page)  # the one script is ours
    assert "&lt;script&gt;" in page and page.count("<script>") == 1


def test_fleet_page_without_an_overview() -> None:
    """A summary computed without Options.overview (a library caller) still makes a page of its findings."""
    summary = summarize([Extractor().extract(make_report(), source="a.json", sha256="0" * 64)])
    page = fleet_page(summary, source="a.json")
    assert "Computed only by compare --html." in page
    assert_inert(page)


@pytest.mark.parametrize(
    ("hostname", "prefix"),
    [("rack12-node034.dc1.example.com", "rack12-node"), ("gpu-b07", "gpu-b"), ("host00021", "host"),
     ("1234", "1234"), ("10.0.0.7", "10.0.0.7")],
)  # fmt: skip
def test_hostname_prefix(hostname: str, prefix: str) -> None:
    """A host's group on the cluster chart: its name without domain and trailing number."""
    assert hostname_prefix(hostname) == prefix


# -- the command line ------------------------------------------------------------------------------


def test_report_html_writes_the_page_and_keeps_the_exit_code(tmp_path: Path) -> None:
    """`report --html` writes the page atomically; the exit code is still the report's verdict (1: fail)."""
    page = tmp_path / "burnin.html"
    r = CliRunner().invoke(cli, ["report", str(BURNIN), "--html", str(page)])
    assert r.exit_code == 1, r.stderr
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert f"Wrote {page}" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == "exit: fail"
    assert oct(page.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("{tmp}", "is a directory"),  # click's own check of the option, as for -o
        ("{tmp}/missing/page.html", "does not exist"),
        ("{tmp}/sub/", "is a directory"),
        ("{tmp}/new/", "names a directory"),  # does not exist yet: the trailing "/" says what was meant
        ("{report}", "name the same file"),
        ("/dev/null", "not a regular file"),
    ],
)
def test_report_html_refuses_a_path_before_reading(tmp_path: Path, where: str, why: str) -> None:
    """A page path that names a directory, a device, a missing directory or the report itself: exit 2."""
    report = tmp_path / "r.json"
    report.write_text(RECORDED.read_text())
    (tmp_path / "sub").mkdir()
    r = CliRunner().invoke(cli, ["report", str(report), "--html", where.format(tmp=tmp_path, report=report)])
    assert r.exit_code == 2, r.stderr
    assert "Error: " in r.stderr and "--html" in r.stderr and why in r.stderr
    assert json.loads(report.read_text()) == json.loads(RECORDED.read_text())


def test_html_that_cannot_be_written_is_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while writing the page: one `Error:` line and exit 3, unless the report fails a unit:
    then 1, which a write error must never hide."""

    def full(path: object, text: str) -> None:
        raise ReportError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr("sdcscan.render.html.page.write_text_atomic", full)
    r = CliRunner().invoke(cli, ["report", str(RECORDED), "--html", str(tmp_path / "p.html")])
    assert r.exit_code == 3
    assert re.search(r"^Error: cannot write .*p\.html: No space left on device$", r.stderr, re.M)
    failing = tmp_path / "fail.json"
    failing.write_text(json.dumps(make_report(fail_unit="cpu:1")))
    r = CliRunner().invoke(cli, ["report", str(failing), "--html", str(tmp_path / "p.html")])
    assert r.exit_code == 1 and r.stderr.rstrip().splitlines()[-1] == "exit: fail", r.stderr


def test_compare_outputs_that_cannot_be_written_never_hide_a_failing_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compare --csv` (and --html) on a full disk: exit 1 when a unit fails, 3 when none does."""

    def full(path: object, text: str) -> None:
        raise ReportError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr("sdcscan.files.write_text_atomic", full)
    for fail_unit, code in (("cpu:1", 1), (None, 3)):
        fleet = tmp_path / f"fleet-{code}"
        fleet.mkdir()
        for host in ("a", "b"):
            doc = make_report(fail_unit=fail_unit if host == "a" else None, hostname=host)
            (fleet / f"{host}.json").write_text(json.dumps(doc))
        r = CliRunner().invoke(cli, ["compare", str(fleet), "--csv", str(tmp_path / f"f{code}.csv")])
        assert r.exit_code == code, r.stderr
        assert re.search(r"^Error: cannot write .*\.csv: No space left on device$", r.stderr, re.M)


def test_compare_html_keeps_the_json_and_the_exit_code(small_fleet: Path, tmp_path: Path) -> None:
    """`compare --html`: the same JSON on stdout and the same exit code as without it, and the page."""
    base = [
        "compare",
        str(small_fleet / "reports"),
        "--hosts",
        str(small_fleet / "hosts.txt"),
        "--now",
        NOW,
        "--json",
        "--jobs",
        "1",
    ]
    plain = CliRunner().invoke(cli, base)
    page = tmp_path / "fleet.html"
    with_page = CliRunner().invoke(cli, [*base, "--html", str(page)])
    assert plain.exit_code == with_page.exit_code == 1
    assert with_page.stdout == plain.stdout
    assert "<h2>Throughput by cohort</h2>" in page.read_text()


def test_compare_html_may_not_replace_an_input(small_fleet: Path, tmp_path: Path) -> None:
    """--html naming the --hosts file (or a report) is refused before any report is read."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text((small_fleet / "hosts.txt").read_text())
    r = CliRunner().invoke(
        cli, ["compare", str(small_fleet / "reports"), "--hosts", str(hosts), "--html", str(hosts)]
    )
    assert r.exit_code == 2
    assert "--hosts and --html name the same file" in r.stderr
    assert hosts.read_text() == (small_fleet / "hosts.txt").read_text()


def test_hostile_report_still_validates() -> None:
    """The hostile fixture is a report every reader accepts: the escaping, not the validator, protects the page."""
    validate_report(copy.deepcopy(hostile_report()), label="hostile")


def test_the_run_page_draws_each_gauge_over_the_run_and_survives_a_hostile_series() -> None:
    """A report with telemetry series gets one line chart per gauge; a series of the wrong shape, NaN or
    endless points is drawn as far as it makes sense, never breaking the page."""
    doc = json.loads(BURNIN.read_text())
    units = doc["telemetry"]["units"]
    for k, uid in enumerate(sorted(units)):
        units[uid]["freq_mhz"]["series"] = {
            "every_s": 5.0,
            "points": [2000.0 + 10 * k + i for i in range(40)],
        }
    page = run_page(validate_report(doc), source="r.json")
    assert "freq_mhz (mean per point) over the run" in page and "seconds into the run" in page
    uid = sorted(units)[0]
    for hostile in ({"every_s": "x", "points": [1.0, 2.0]}, {"every_s": 5.0, "points": [float("nan")] * 3},
                    {"every_s": 5.0, "points": list(range(100000))}, "not a series"):  # fmt: skip
        units[uid]["freq_mhz"]["series"] = hostile
        page = run_page(validate_report(copy.deepcopy(doc)), source="r.json")
        assert "<html" in page and len(page) < 2_000_000


def test_efficiency_ticks_read_apart_and_an_efficiency_over_100_percent_is_called_uncertain() -> None:
    """Issue 45: an efficiency axis of a few tenths of a percent was labelled "0%, 0%, 1%", and the run
    page showed 229% where the peak was measured under contention. Ticks now carry the decimals their step
    needs; above 100% the table says the figure is uncertain instead of showing it."""
    from sdcscan.render.html.svg import nice_ticks, pct_ticks

    ticks = nice_ticks(0.0, 0.0108, 5)
    labels = [pct_ticks(ticks)(t) for t in ticks]
    assert len(set(labels)) == len(labels) and labels[1] == "0.5%", labels
    doc = load_report(BURNIN)
    doc["units"][0]["throughput"]["gemm_int8"]["efficiency"] = 2.29
    doc["units"][1]["throughput"]["gemm_int8"]["efficiency"] = 0.0042
    page = run_page(validate_report(doc), source="burnin.json")
    assert "gemm_int8 uncertain (above 100%: the peak was measured under load)" in page
    assert "229%" not in page


def test_run_page_marks_where_an_invalid_unit_stopped_and_what_a_pass_proves() -> None:
    """Issue 45: a unit whose case hung has no outcome for it; the timeline marks where it stopped, with
    the reason. Each unit's coverage and rate bound are stated, and the header names the software."""
    doc = copy.deepcopy(load_report(RECORDED))
    hung = doc["units"][1]
    hung.update(verdict="invalid", reason="case 7 (gemm_int8) hung: no result after 61 s; worker killed")
    doc["units"][0]["checked"] = {
        "gemm_int8": {"checked_ops": 4.1e12, "op": "multiply-add", "evidence": "invariant", "detection": 1.0,
                      "sdc_rate_bound": 7.4e-13},
    }  # fmt: skip
    doc["software"] = {"python": "3.11.7", "torch": "2.13.0+cpu", "cuda": None, "cpu_capability": "AVX512"}
    page = run_page(validate_report(doc, label="hung"), source="hung.json")
    assert_inert(page)
    stopped = re.findall(r'class="mark o-stopped"[^>]*><title>([^<]*)</title>', page)
    at = sum(hung["cases"]["seconds"])
    assert stopped == [f"{hung['id']} stopped after {at:.0f} s of cases: {hung['reason']}"]
    assert "stopped (hung, died, not ready)" in page
    assert "<h2>What a pass proves</h2>" in page
    assert "gemm_int8: no corruption in 4.1e12 checked multiply-adds: rate &lt; 7.4e-13 per op (95%)" in page
    assert "<li>software <b>Python 3.11.7, torch 2.13.0+cpu, ISA AVX512</b></li>" in page
    clean = run_page(load_report(RECORDED), source="r.json")
    assert "o-stopped" not in clean.split("<style>")[1].split("</style>")[1]  # only the stylesheet names it
