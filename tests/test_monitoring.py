"""deploy/prometheus and deploy/grafana: promtool checks and unit-tests the rules, and every query names only
metrics and labels sdcscan writes, as found by rendering real textfiles with sdcscan.outputs.prom."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sdcscan.outcomes import VERDICTS
from sdcscan.outputs.prom import prom_text, sentinel_prom_text
from sdcscan.telemetry.sampler import REDUCE, Sampler
from sdcscan.telemetry.sources import Reading, Source
from tests.helpers.reports import make_report
from tests.helpers.tools import missing_tool

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "sdcscan.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "sdcscan.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "sdcscan-dashboard.json"
README = DEPLOY / "README.md"

# Labels Prometheus adds or uses itself: the scrape's target labels, histogram buckets, the metric name.
# Labels Prometheus itself attaches: its target's, and `cluster`, the external label a server of a
# multi-cluster setup adds to every series (the dashboard's cluster variable; All matches its absence).
PROMETHEUS_LABELS = {"instance", "job", "le", "__name__", "cluster"}

_METRIC = re.compile(r"\bsdcscan_\w+")  # recorded series are named sdcscan:..., so they do not match
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"\b(sdcscan_\w+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(=~|!~|!=|=)\s*\"((?:[^\"\\]|\\.)*)\"")
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_TEMPLATE_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}|\$labels\.(\w+)")  # legendFormat, rule annotations


@pytest.fixture
def promtool() -> str:
    """promtool's path; skipped where it is not installed, except in CI (.ci/run installs it)."""
    path = shutil.which("promtool")
    if path is None:
        missing_tool("promtool", "Debian: apt-get install prometheus")
    assert path is not None
    return path


# --- what sdcscan writes ---------------------------------------------------------------------------


class _Sensors(Source):
    """A host counter that rises and one GPU's power and clock, read through the real Sampler."""

    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self) -> Reading:
        self.reads += 1
        return {
            "host": {"edac_ce_count": float(self.reads)},
            "cuda:0": {"power_w": 650.0, "clock_sm_mhz": 1755.0},
        }


_SENTINEL = {
    "since": "2026-03-10T10:00:00Z", "until": "2026-03-10T11:00:00Z", "sources": ["journal"], "notes": [],
    "host_counts": {"segfault": 6}, "outliers": [{"unit": "cpu:7", "programs": 5, "expected": 0.4, "p_value": 1e-6}],
    "units": {"cpu:7": {"counts": {"segfault": 6}, "processes": 6, "programs": 5}},
}  # fmt: skip


def _emitted() -> dict[str, set[str]]:
    """Each metric sdcscan writes -> its label names: a failing run's textfile with telemetry, coverage and a
    kernel-log scan, and `sdcscan sentinel --prom`'s textfile."""
    report: dict[str, Any] = make_report(fail_unit="cpu:1", checked=True)
    with Sampler(["cpu:0", "cuda:0"], interval_s=60, sources=[_Sensors()], busy=lambda unit: True) as sampler:
        pass
    report["telemetry"] = sampler.summary()
    report["sentinel"] = _SENTINEL
    coverage = {"cpu:0": {"cases": 8, "seconds": 2.0, "runs": 1}}
    text = prom_text(report, coverage=coverage) + sentinel_prom_text(_SENTINEL, "node-a")
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        assert family.samples, f"{family.name} has no sample here: give it one, or its labels are unknown"
        labels.setdefault(family.name, set()).update(k for s in family.samples for k in s.labels)
    return labels


# --- the queries ----------------------------------------------------------------------------------


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _panels(_dashboard()["panels"]) for t in p.get("targets", [])]


def _queries() -> dict[str, str]:
    """Where -> PromQL, Grafana template or legend, over the rules and the dashboard."""
    out = {f"rule {r.get('alert') or r['record']}": r["expr"] for r in _rules()}
    out.update(
        {f"annotation of {r['alert']}": " ".join(r.get("annotations", {}).values()) for r in _alerts()}
    )
    for panel in _panels(_dashboard()["panels"]):
        for t in panel.get("targets", []):
            out[f"panel {panel['title']!r} {t['refId']}"] = f"{t['expr']} {t.get('legendFormat', '')}"
    for var in _dashboard()["templating"]["list"]:
        out[f"variable {var['name']}"] = json.dumps(var.get("query", ""))
    return out


def _names(query: str) -> tuple[set[str], set[str], list[tuple[str, str]]]:
    """(metric names, label names, (metric, label) pairs of selectors) a query uses."""
    bare = _STRING.sub('""', query)
    metrics = set(_METRIC.findall(bare))
    labels = {m[0] for m in _MATCHER.findall(query)}
    labels |= {name.strip() for clause in _CLAUSE.findall(bare) for name in clause.split(",") if name.strip()}
    labels |= {a or b for a, b in _TEMPLATE_LABEL.findall(query)}
    pairs = [(metric, m[0]) for metric, body in _SELECTOR.findall(query) for m in _MATCHER.findall(body)]
    for metric, label in _LABEL_VALUES.findall(query):
        metrics.add(metric)
        labels.add(label)
        pairs.append((metric, label))
    return metrics, labels, pairs


def test_the_name_parser_finds_metrics_labels_and_selectors() -> None:
    """Metric names outside strings, matcher, clause and template labels, and which metric each matcher is on."""
    metrics, labels, pairs = _names(
        'sum by (model, metric) (sdcscan_a{unit=~"cpu:.*", x!="sdcscan_no"}) / on (instance) sdcscan:rec '
        "{{kind}} {{ $labels.seed }} label_values(sdcscan_b, job)"
    )
    assert metrics == {"sdcscan_a", "sdcscan_b"}
    assert labels == {"model", "metric", "unit", "x", "instance", "kind", "seed", "job"}
    assert pairs == [("sdcscan_a", "unit"), ("sdcscan_a", "x"), ("sdcscan_b", "job")]


def test_queries_name_only_metrics_and_labels_sdcscan_writes() -> None:
    """Every metric and label in a rule, an annotation, a panel, a legend or a variable is one the code emits."""
    emitted = _emitted()
    all_labels = set().union(*emitted.values()) | PROMETHEUS_LABELS
    problems = []
    for where, query in _queries().items():
        metrics, labels, pairs = _names(query)
        problems += [f"{where}: metric {m} is not written by sdcscan" for m in sorted(metrics - set(emitted))]
        problems += [f"{where}: label {label} is on no metric" for label in sorted(labels - all_labels)]
        problems += [
            f"{where}: {m} has no label {label}"
            for m, label in pairs
            if m in emitted and label not in emitted[m] | PROMETHEUS_LABELS
        ]
    assert not problems, "\n".join(problems)


def test_every_metric_sdcscan_writes_is_in_a_rule_or_a_panel() -> None:
    """A metric no alert and no panel shows is either forgotten here or not worth writing."""
    used = set().union(*(_names(q)[0] for q in _queries().values()))
    assert not sorted(set(_emitted()) - used)


def test_matched_verdicts_and_telemetry_metrics_exist() -> None:
    """Label values the queries select on that the code defines: verdict words and telemetry metric names."""
    known = {"verdict": set(VERDICTS), "metric": set(REDUCE)}
    for where, query in _queries().items():
        for label, op, value in _MATCHER.findall(query):
            if label in known and op in ("=", "=~"):
                words = value.split("|") if op == "=~" else [value]
                assert set(words) <= known[label], (where, label, value)


# --- the rules -------------------------------------------------------------------------------------


def test_rules_pass_promtool_check(promtool: str) -> None:
    """promtool parses every rule, expression and template, and every file `deploy/prometheus/*.yml`
    names is a rule file (issue 45: the rule tests beside them failed that check)."""
    files = sorted(str(p) for p in (DEPLOY / "prometheus").glob("*.yml"))
    assert str(RULES) in files and str(RULE_TESTS) not in files
    subprocess.run([promtool, "check", "rules", *files], check=True, capture_output=True, text=True)


def test_rules_pass_their_unit_tests(promtool: str) -> None:
    """sdcscan.rules.test.yml: each alert fires with the expected labels and annotations, or stays quiet."""
    r = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """Each alert has a test where it fires and one where it must not."""
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    for alert in _alerts():
        mine = [c.get("exp_alerts") or [] for c in cases if c["alertname"] == alert["alert"]]
        assert any(mine) and not all(mine), alert["alert"]


def test_every_alert_says_what_to_do_and_its_threshold() -> None:
    """summary, description and threshold annotations and a severity; the README lists each with its threshold."""
    readme = README.read_text()
    for alert in _alerts():
        notes = alert["annotations"]
        assert {"summary", "description", "threshold"} <= set(notes), alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning")
        assert f"`{alert['alert']}`" in readme and notes["threshold"] in readme, alert["alert"]


# --- the dashboard ---------------------------------------------------------------------------------


def test_dashboard_queries_a_templated_prometheus_datasource() -> None:
    """schemaVersion 39, a `datasource` variable every panel and query uses, and a host (`instance`) variable."""
    dash = _dashboard()
    assert dash["schemaVersion"] == 39
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["instance"]["type"] == "query"
    ds = {"type": "prometheus", "uid": "${datasource}"}
    for panel in _panels(dash["panels"]):
        if panel["type"] != "row":
            assert panel["datasource"] == ds and all(t["datasource"] == ds for t in panel["targets"])
    ids = [p["id"] for p in _panels(dash["panels"])]
    assert len(ids) == len(set(ids))


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Each panel's query, with its variables filled in, parses (as a recording rule promtool checks)."""
    exprs = [
        e.replace("$instance", "node-a:9100").replace("$cluster", ".*").replace("$job", ".*")
        for e in _dashboard_exprs()
    ]
    rules = {
        "groups": [
            {"name": "panels", "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(rules))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_query_is_scoped_by_the_cluster_and_job_variables() -> None:
    """Issue 45: a dashboard over several clusters needs `cluster` and `job` variables (multi-valued, All
    matching series without the label too), and every selector of a per-host series honours both; the
    fleet-wide aggregates of the rules (a model's median, the screened ratio) have no cluster of their own."""
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    for name in ("cluster", "job"):
        var = variables[name]
        assert var["multi"] and var["includeAll"] and var["allValue"] == ".*", var
        assert var["query"]["query"] == f"label_values(sdcscan_last_run_timestamp_seconds, {name})"
    assert '{cluster=~"$cluster", job=~"$job"}' in variables["instance"]["query"]["query"]
    selectors = [
        m
        for e in _dashboard_exprs()
        for m in re.finditer(r"\b(sdcscan(?::[a-z0-9_]+|_[a-z0-9_]+)+)(\{[^}]*\})?", e)
    ]
    assert len(selectors) > 40
    for m in selectors:
        if m.group(1).endswith((":model_median", ":ratio")):
            continue
        assert m.group(2) and 'cluster=~"$cluster"' in m.group(2) and 'job=~"$job"' in m.group(2), m.group(0)


def test_the_prometheus_operator_rule_holds_the_rules_files_groups() -> None:
    """deploy/kubernetes/sdcscan-prometheusrule.yaml is the rules file as a PrometheusRule, group for group."""
    rule = yaml.safe_load((DEPLOY / "kubernetes" / "sdcscan-prometheusrule.yaml").read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    """Each alert's runbook_url points to a `### Runbook: NAME` section of deploy/README.md (issue 45)."""
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line[4:].strip().lower()).replace(" ", "-")
        for line in README.read_text().splitlines()
        if line.startswith("### ")
    }
    rules = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [rule for group in rules for rule in group["rules"] if "alert" in rule]
    assert alerts
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "deploy/README.md" and anchor == f"runbook-{rule['alert'].lower()}", url
        assert anchor in headings, (anchor, sorted(h for h in headings if h.startswith("runbook")))
