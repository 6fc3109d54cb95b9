"""The HTML pages in headless Chromium: they load with no console error and no request, every chart is
drawn, and a 10,000-host fleet's page stays under about 5 MB and renders in under 2 s.

Chromium is driven over its DevTools pipe (`tests.helpers.browser`). Without it the tests skip, except
under `.ci/run`, which installs it and makes them fail instead (`tests.helpers.tools`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sdcscan.cli import cli
from sdcscan.fleet.compare import compare_files
from sdcscan.fleet.reading import read_hosts
from sdcscan.fleet.summary import Options
from sdcscan.render.html import fleet_page, run_page, write_page
from sdcscan.report import load_report
from sdcscan.timefmt import parse_iso_utc
from tests.helpers.browser import PageLoad, load_page
from tests.helpers.scripts import load_script

DATA = Path(__file__).parent / "data"
NOW = "2025-06-02T12:00:00Z"  # scripts/simulate_fleet.py's reference time
MAX_PAGE_BYTES = 5_000_000
MAX_RENDER_MS = 2000.0


def assert_clean_and_drawn(load: PageLoad, *, charts_at_least: int) -> None:
    """No console error or failed load, no request, and each chart laid out with marks that have an area."""
    assert load.errors == []
    assert load.requests == []
    assert len(load.charts) >= charts_at_least, load.charts
    for chart in load.charts:
        assert chart["width"] > 0 and chart["height"] > 0, chart
        assert chart["drawn"] >= 1, chart


@pytest.mark.parametrize("name", ["report_burnin.json", "report_v1.json"])
def test_run_page_loads_clean_with_every_chart_drawn(tmp_path: Path, name: str) -> None:
    """A recorded report's page: no console error, nothing fetched, the unit grid and every series drawn."""
    doc = load_report(DATA / name)
    page = tmp_path / "run.html"
    write_page(page, run_page(doc, source=name))
    load = load_page(page)
    workloads = {w for u in doc["units"] for w in u["throughput"]}
    assert_clean_and_drawn(load, charts_at_least=1 + 2 * len(workloads) + 1)
    assert doc["host"]["hostname"] in load.text


def test_fleet_page_loads_clean_with_every_chart_drawn(tmp_path: Path) -> None:
    """`compare --html` on a simulated fleet: findings, histograms, ages and clusters all drawn."""
    out = tmp_path / "fleet"
    load_script("simulate_fleet").main(
        ["--hosts", "150", "--units", "4", "--cases", "30", "--out", str(out), "--seed", "2"]
    )
    page = tmp_path / "fleet.html"
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(out / "reports"),
            "--hosts",
            str(out / "hosts.txt"),
            "--now",
            NOW,
            "--jobs",
            "1",
            "--html",
            str(page),
        ],
    )
    assert r.exit_code == 1, r.stderr  # the planted faults
    load = load_page(page)
    assert_clean_and_drawn(load, charts_at_least=1 + 4 + 1 + 3)
    assert "Where failing units cluster" in load.text


ROWS_JS = "[...document.querySelectorAll('table.sortable tbody tr')]"
SORT_BY_JS = (
    "document.querySelectorAll('table.sortable th')[{}].click(); " + ROWS_JS + ".map(r => r.cells[{}]{})"
)
FILTER_JS = (
    "(() => {{ const i = document.querySelector('input.filter'); i.value = {!r}; "
    "i.dispatchEvent(new Event('input')); return [" + ROWS_JS + ".filter(r => !r.hidden).length, "
    "i.nextElementSibling.textContent]; }})()"
)


def test_the_fleet_pages_findings_sort_and_filter_under_its_policy(tmp_path: Path) -> None:
    """The findings table in a browser, under the page's policy (a script without its hash would be
    refused, with an error): a heading sorts by its column and again the other way, kind by severity,
    and the filter shows only the rows holding its text."""
    out = tmp_path / "fleet"
    load_script("simulate_fleet").main(
        ["--hosts", "60", "--units", "4", "--cases", "20", "--out", str(out), "--seed", "3"]
    )
    opts = Options(hosts=read_hosts(str(out / "hosts.txt")), now=parse_iso_utc(NOW), overview=False)
    summary = compare_files([str(out / "reports")], opts)
    page = tmp_path / "fleet.html"
    write_page(page, fleet_page(summary, source="reports/"))
    host = summary.findings[-1].host
    load = load_page(
        page,
        actions=(
            SORT_BY_JS.format(0, 0, ".textContent"),
            SORT_BY_JS.format(0, 0, ".textContent"),
            SORT_BY_JS.format(2, 2, ".getAttribute('data-sort')"),
            FILTER_JS.format(host),
            FILTER_JS.format(""),
        ),
    )
    assert load.errors == [] and load.requests == []
    up, down, severity, (held, said), (everything, cleared) = load.results
    hosts = [f.host for f in summary.findings]
    assert len(hosts) > 5 and up == sorted(hosts, key=str.lower) and down == up[::-1]
    assert [int(k) for k in severity] == sorted(int(k) for k in severity)
    assert held == hosts.count(host) and said == f"{held} of {len(hosts)} rows"
    assert everything == len(hosts) and cleared == ""


def test_the_harness_sees_errors_and_requests(tmp_path: Path) -> None:
    """A page that fetches and throws is caught: the checks above can fail."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
        "<script>console.error('boom'); undefined_function();</script>"
        '<svg class="chart" width="10" height="10"></svg></body></html>'
    )
    load = load_page(page)
    assert any("boom" in e for e in load.errors) and any("exception" in e for e in load.errors)
    assert load.requests == ["http://127.0.0.1:9/x.png"]
    assert load.charts[0]["drawn"] == 0


@pytest.mark.slow
def test_ten_thousand_host_page_is_small_and_quick(tmp_path: Path) -> None:
    """A 10,000-host fleet (8 units, 16 cases each): the page is under 5 MB and paints in under 2 s. The
    page follows the hosts and units, not the cases (129.0 kB with 16 cases, 129.8 kB with 100), and 16
    take 9 s of the suite less to simulate and compare."""
    out = tmp_path / "fleet"
    load_script("simulate_fleet").main(
        ["--hosts", "10000", "--units", "8", "--cases", "16", "--out", str(out), "--seed", "1"]
    )
    opts = Options(hosts=read_hosts(str(out / "hosts.txt")), now=parse_iso_utc(NOW), overview=True)
    summary = compare_files([str(out / "reports")], opts)
    page = tmp_path / "fleet.html"
    write_page(page, fleet_page(summary, source="reports/"))
    assert page.stat().st_size < MAX_PAGE_BYTES
    load = load_page(page)
    assert load.render_ms < MAX_RENDER_MS, load.render_ms
    assert_clean_and_drawn(load, charts_at_least=1 + 4 + 1 + 3)
