"""The cluster report of a distributed run: every rank's report merged into one, judged across ranks.

Each rank writes an ordinary report of its one unit (`sdcscan run --out`); rank 0 merges them into
one document of the same schema. A rank's unit `cpu:1` becomes `rank3/cpu:1` (unit ids repeat across
hosts), with the rank, host, local rank and device beside it; every record that names a unit (case
mismatches, disputes, errors, findings, telemetry) is renamed with it. Then the cluster adds what no
rank can see alone:

- a rank that wrote no report (it died, hung or timed out) is an `invalid` unit and a finding;
- the digests of all ranks are compared by `sdcscan compare`'s rule (its engine, `fleet.decide`:
  units vote within their host, each host casts one vote). A unit compare finds `divergent` fails;
  one compare leaves `undecided` cannot be judged (`invalid`): its digest disagrees and nobody can
  say who is right, which is neither a pass nor proof that it miscomputes;
- the attributions the distributed workloads record (a mismatch whose `where` names a hop or a
  rank) are one finding per distinct text, however many ranks reported it.

The run's verdict follows the rules of a host's report: the worst unit verdict (`Verdict.worst`),
`interrupted` when any rank was stopped by a signal. Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from typing_extensions import TypedDict

from sdcscan import proof
from sdcscan.errors import ReportError
from sdcscan.fleet.compare import judged_reports
from sdcscan.fleet.consensus import FLEET, GOLDEN, HOST
from sdcscan.fleet.decide import decide
from sdcscan.fleet.engine import Rows
from sdcscan.fleet.findings import FleetFinding
from sdcscan.fleet.model import Extractor, HostReport
from sdcscan.fleet.sql_steps import CASE_REFERENCES, COMPARISON_GROUPS
from sdcscan.fleet.summary import Options
from sdcscan.judgement.wording import finding, replay_args
from sdcscan.outcomes import Verdict, unit_order
from sdcscan.report import validate_report, verdict_exit_code
from sdcscan.report.document import (
    Dispute,
    Distributed,
    Finding,
    Host,
    Metrics,
    Mismatch,
    RankEntry,
    Report,
    Retest,
    RetestCase,
    Run,
    Telemetry,
    Unit,
    VerdictWord,
    build_report,
)

__all__ = ["DISTRIBUTED_WORKLOADS", "RankInfo", "merge_rank_reports", "rank_unit_id"]

RANK_UNIT = re.compile(r"^(cpu|cuda):[0-9]+$")  # the unit a rank runs on
# Workloads whose mismatches carry an attribution in `where` ("hop 1→2 corrupts blocks ...").
DISTRIBUTED_WORKLOADS = frozenset({"collective", "train_dp"})
MAX_ATTRIBUTION_FINDINGS = 20  # distinct attributions listed one by one; the rest are counted
# What compare's basis of a reference digest means, in a sentence about a divergent unit.
_BASIS_WORDS = {
    HOST: "the majority of the other units on its host",
    FLEET: "the digest more than 2/3 of the hosts agree on",
    GOLDEN: "the golden",
    "own run": "its own run's consensus",
}


class Rejudged(TypedDict):
    """A unit's verdict and reason as the cross-rank consensus leaves them."""

    verdict: VerdictWord
    reason: str


@dataclass(frozen=True)
class RankInfo:
    """One rank of the world, as the launcher knows it (whether or not the rank wrote a report).

    Attributes:
        rank: Its global rank.
        host: The hostname it ran on.
        local_rank: Its rank on that host.
        unit: The unit it tested, `cpu:N` or `cuda:N`.
        device: The GPU's UUID or PCI bus id; None on a CPU.
        report: The path of its rank report, None when it wrote none.
    """

    rank: int
    host: str
    local_rank: int
    unit: str
    device: str | None = None
    report: str | None = None

    def __post_init__(self) -> None:
        if self.rank < 0 or self.local_rank < 0:
            raise ValueError(f"rank {self.rank}: rank and local rank must be >= 0")
        if not RANK_UNIT.fullmatch(self.unit):
            raise ValueError(f"rank {self.rank}: unit {self.unit!r} is not cpu:N or cuda:N")
        if not self.host:
            raise ValueError(f"rank {self.rank}: empty host name")

    @property
    def unit_id(self) -> str:
        """Its unit as the cluster report names it."""
        return rank_unit_id(self.rank, self.unit)


def rank_unit_id(rank: int, unit: str) -> str:
    """`rank3/cpu:1`: unit ids repeat across hosts (and ranks of one host), so the rank comes first."""
    return f"rank{rank}/{unit}"


def merge_rank_reports(
    rank_reports: Mapping[int, object],
    ranks: Sequence[RankInfo],
    *,
    missing: Mapping[int, str],
    run: Run,
    backend: str | None = None,
) -> Report:
    """Merge the ranks' reports into the cluster report and judge the digests across ranks.

    Args:
        rank_reports: rank -> its judged report, one unit each; one `report.validate_report` refuses
            leaves its rank an invalid unit with the refusal as the reason.
        ranks: every rank of the world, in rank order.
        missing: rank -> why it has no report ("rank 2 died (SIGKILL)"); a rank with neither a report
            nor a reason here is missing too.
        run: the cluster's `run` object (id, profile, seed, budget, started/ended, argv, ...);
            `run.distributed` is added (world size, backend, one record per rank).
        backend: the data group's backend ("nccl", "gloo"), if known.

    Returns:
        A report of schema 1 (`report.schema.json`) holding every rank's units.

    Raises:
        ValueError: ranks repeat, or a report is given for a rank not in `ranks`.
    """
    _check_world(rank_reports, ranks)
    usable, refused = _usable(rank_reports)
    renamed = {info.rank: _renamed(usable[info.rank], info) for info in ranks if info.rank in usable}
    units: list[Unit] = []
    findings: list[Finding] = []
    for info in ranks:
        doc = renamed.get(info.rank)
        if doc is not None and doc["units"]:
            units += doc["units"]
            findings += doc["findings"]
            continue
        why = refused.get(info.rank) or missing.get(info.rank) or f"rank {info.rank} wrote no report"
        if doc is not None:
            why = f"rank {info.rank}'s report holds no unit"
            findings += doc["findings"]
        units.append(_missing_unit(info, why))
        findings.append(_missing_finding(info, why))
    docs = [(info, renamed[info.rank]) for info in ranks if info.rank in renamed]
    host_reports = _host_reports(docs)
    with judged_reports(host_reports) as db:  # one run of compare's engine for both questions
        consensus = [f for f in decide(db, Options()).findings if f.kind in ("divergent", "undecided")]
        references = _references(db)
    rejudged, consensus_findings = _judge_consensus(consensus, {u["id"]: u for u in units}, docs)
    units = [_rejudged(u, rejudged[u["id"]]) if u["id"] in rejudged else u for u in units]
    findings += consensus_findings
    mismatches = [m for _, d in docs for m in d.get("mismatches", [])]
    findings += _attribution_findings(mismatches)
    units.sort(key=lambda u: unit_order(u["id"]))
    first = docs[0][1] if docs else None
    run_doc = _run_doc(run, ranks, units, [d for _, d in docs], backend)
    verdict = _cluster_verdict(units, run_doc, [d for _, d in docs])
    report = build_report(
        tool=first["tool"] if first else {"name": "sdcscan", "version": ""},
        verdict=verdict.value,
        exit_code=0,  # set below from the verdict, as `sdcscan report` derives it
        run=run_doc,
        host=_host_doc(ranks, first),
        software=first.get("software", {}) if first else {},
        cohorts={k: v for _, d in docs for k, v in d.get("cohorts", {}).items()},
        units=units,
        mismatches=mismatches,
        disputes=[x for _, d in docs for x in d.get("disputes", [])]
        + _cross_rank_disputes(host_reports, references),
        errors=[e for _, d in docs for e in d.get("errors", [])],
        telemetry=_telemetry(docs),
        findings=_unique(findings),
    )
    report["exit_code"] = verdict_exit_code(report)
    return report


def _usable(reports: Mapping[int, object]) -> tuple[dict[int, Report], dict[int, str]]:
    """The rank reports `validate_report` accepts, and why each other one is refused: a report that
    reached rank 0 damaged leaves its rank unjudged, never the cluster without a report."""
    usable: dict[int, Report] = {}
    refused: dict[int, str] = {}
    for rank, report in reports.items():
        try:
            usable[rank] = validate_report(report, label=f"rank {rank}'s report")
        except ReportError as err:
            refused[rank] = f"{err} (refused)"
    return usable, refused


def _check_world(rank_reports: Mapping[int, object], ranks: Sequence[RankInfo]) -> None:
    numbers = [info.rank for info in ranks]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"ranks repeat: {sorted(numbers)}")
    strangers = sorted(set(rank_reports) - set(numbers))
    if strangers:
        raise ValueError(f"reports of ranks outside the world: {strangers}")


# --------------------------------------------------------------------------------------------------
# Renaming: a rank report's units and every record that names them.


def _renamed(report: Report, info: RankInfo) -> Report:
    """A copy of a rank report whose unit ids are `rank{R}/{unit}`, with the rank's facts on each unit."""
    names = {u["id"]: rank_unit_id(info.rank, u["id"]) for u in report["units"]}
    text = _renamer(names)

    units = [_renamed_unit(u, names, text, info) for u in report["units"]]
    telemetry: Telemetry = report.get("telemetry") or {}
    return {
        **report,
        "units": units,
        "mismatches": [{**m, "unit": names.get(m["unit"], m["unit"])} for m in report.get("mismatches", [])],
        "errors": [
            {**e, "unit": names.get(e["unit"], e["unit"])} if "unit" in e else e
            for e in report.get("errors", [])
            if isinstance(e, dict)  # not validated: no reader relies on it
        ],
        "disputes": [
            {**d, "digests": {names.get(k, k): v for k, v in d["digests"].items()}}
            for d in report.get("disputes", [])
        ],
        "findings": [_renamed_finding(f, names, text, info.host) for f in report["findings"]],
        "telemetry": {
            "host": telemetry.get("host") or {},
            "units": {names.get(k, k): v for k, v in (telemetry.get("units") or {}).items()},
        },
    }


def _renamed_unit(u: Unit, names: Mapping[str, str], text: Callable[[str], str], info: RankInfo) -> Unit:
    renamed: Unit = {
        **u,
        "id": names[u["id"]],
        "reason": text(u["reason"]) if u["reason"] else u["reason"],
        "rank": info.rank,
        "host": info.host,
        "local_rank": info.local_rank,
        "device": info.device,
    }
    retest = u.get("retest")
    if isinstance(retest, dict):  # not validated: no reader relies on it
        renamed["retest"] = _renamed_retest(retest, names)
    return renamed


def _renamer(names: Mapping[str, str]) -> Callable[[str], str]:
    """A function that renames every whole unit id of `names` in a text (`cpu:1`, not `cpu:10`)."""
    if not names:
        return lambda text: text
    pattern = re.compile(
        r"(?<![\w/:])(" + "|".join(re.escape(k) for k in sorted(names, key=len, reverse=True)) + r")(?!\d)"
    )
    return lambda text: pattern.sub(lambda m: names[m.group(1)], text)


def _renamed_finding(f: Finding, names: Mapping[str, str], text: Callable[[str], str], host: str) -> Finding:
    """A rank's finding in the cluster: its unit renamed, host-level ones said of their host, and the
    next step (a command to run on that host, with the host's own unit names) said where to run it."""
    unit = names.get(f["unit"], f["unit"]) if f["unit"] is not None else None
    message = text(f["message"]) if unit is not None else f"{host}: {text(f['message'])}"
    next_step = f.get("next")
    return {
        **f,
        "unit": unit,
        "message": message,
        "next": f"on {host}: {next_step}" if next_step else next_step,
    }


def _renamed_retest(retest: Retest, names: Mapping[str, str]) -> Retest:
    """The re-test record with its peers renamed. Not validated (no reader relies on it), so anything
    not of the written shape is kept as it came."""
    cases = retest.get("cases")
    if not isinstance(cases, list):
        return retest
    renamed: list[RetestCase] = [
        {**c, "peers": [names.get(p, p) for p in c.get("peers", [])]} if isinstance(c, dict) else c
        for c in cases
    ]
    return {**retest, "cases": renamed}


# --------------------------------------------------------------------------------------------------
# Ranks without a report.


def _missing_unit(info: RankInfo, why: str) -> Unit:
    """The unit of a rank that wrote no report: invalid, with the reason, having run nothing."""
    uid = info.unit_id
    return {
        "id": uid,
        "kind": "cuda" if info.unit.startswith("cuda:") else "cpu",
        "model": "",
        "cohort": f"unstarted:{uid}",
        "verdict": Verdict.INVALID.value,
        "reason": why,
        "cases_run": 0,
        "workloads": [],
        "throughput": {},
        "mismatches": 0,
        "first_bad_case": None,
        "notes": [],
        "cases": {"index": [], "workload": [], "digest": [], "status": [], "seconds": []},
        "rank": info.rank,
        "host": info.host,
        "local_rank": info.local_rank,
        "device": info.device,
    }


def _missing_finding(info: RankInfo, why: str) -> Finding:
    return finding(
        "rank_missing",
        info.unit_id,
        f"rank {info.rank} ({info.unit} on {info.host}, local rank {info.local_rank}) has no report, so "
        f"its unit could not be judged: {why}.",
        f"read rank {info.rank}'s output and the system log on {info.host}, then re-run the distributed run",
    )


# --------------------------------------------------------------------------------------------------
# Consensus across ranks, by compare's rule.


def _host_reports(docs: Sequence[tuple[RankInfo, Report]]) -> list[HostReport]:
    """One in-memory report per host and plan holding all that host's rank units, as compare reads them.

    compare keeps only the newest report of a host and plan, so the ranks of one host must be one
    report: fed separately, all but one would be dropped as superseded.
    """
    groups: dict[tuple[str, str, int], list[Report]] = {}
    for info, doc in docs:
        plan = (info.host, doc["run"]["profile"]["sha256"], doc["run"]["seed"])
        groups.setdefault(plan, []).append(doc)
    extractor = Extractor()
    reports = []
    for k, ((host, _, _), members) in enumerate(sorted(groups.items())):
        units = [u for d in members for u in d["units"]]
        merged: Report = {
            **members[0],
            "run": {**members[0]["run"], "id": f"{members[0]['run']['id']}#{k}"},  # dedupe keeps each
            "host": {"hostname": host},
            "verdict": Verdict.worst((u["verdict"] for u in units), default=Verdict.PASS).value,
            "units": units,
            "mismatches": [m for d in members for m in d.get("mismatches", [])],
            "findings": [f for d in members for f in d["findings"]],
            "disputes": [],
        }
        merged.pop("sentinel", None)  # the kernel log's evidence is the rank reports' own, not a vote
        reports.append(extractor.extract(merged, source=f"rank reports of {host}"))
    return reports


def _judge_consensus(
    found: Iterable[FleetFinding],
    units: Mapping[str, Unit],
    docs: Sequence[tuple[RankInfo, Report]],
) -> tuple[dict[str, Rejudged], list[Finding]]:
    """What compare's divergent and undecided findings make of the units: their new verdicts and
    reasons (unit id -> the keys to replace), and the report's findings.

    A divergent unit fails, as a divergent unit of a host's run does, without hiding that it could
    not be judged (an invalid unit stays invalid). An undecided unit that passed becomes invalid.
    """
    run_of = {u["id"]: d["run"] for _, d in docs for u in d["units"]}
    rejudged: dict[str, Rejudged] = {}
    out = []
    for f in found:
        ev = f.evidence
        named = [f.unit] if f.unit is not None else [u for u in ev.get("units", []) if u in units]
        if f.kind == "divergent":
            case = f"case {ev.get('first_disputed_case')} ({ev.get('workload')})"
            against = _BASIS_WORDS.get(ev.get("basis", ""), "the cross-rank consensus")
            for uid in named:
                if _verdict_now(uid, units, rejudged) in (Verdict.PASS, Verdict.INTERRUPTED):
                    rejudged[uid] = {
                        "verdict": Verdict.FAIL.value,
                        "reason": f"digest of {case} disagreed with the ranks' consensus ({ev.get('basis')})",
                    }
            who = ", ".join(named)
            out.append(
                finding(
                    "divergent",
                    f.unit,
                    f"{who} on {f.host}: digest of {case} differs from {against} "
                    f"({ev.get('hosts_voted')} host(s), {ev.get('units_voted')} unit(s) voted; "
                    f"{ev.get('disputed_cases')} disputed case(s)).",
                    _replay(named[0], units, run_of) if named else None,
                )
            )
        else:
            case = f"case {ev.get('first_undecided_case')} ({ev.get('workload')})"
            for uid in named:
                if _verdict_now(uid, units, rejudged) == Verdict.PASS:
                    rejudged[uid] = {
                        "verdict": Verdict.INVALID.value,
                        "reason": f"digest of {case} disagrees across ranks and the consensus cannot decide",
                    }
            out.append(
                finding(
                    "undecided",
                    None,
                    f"{f.host}: units {', '.join(named)} disagree with other ranks at {case} "
                    f"({ev.get('undecided_cases')} case(s)) and the ranks' consensus cannot decide: {ev.get('why')}.",
                    "re-run on more hosts, or judge the ranks against a golden "
                    "(sdcscan golden record REPORT… of known-good hosts of this plan)",
                )
            )
    return rejudged, out


def _rejudged(unit: Unit, new: Rejudged) -> Unit:
    """`unit` with the verdict the consensus gave it; a pass's rate bounds go with the pass."""
    out = cast(Unit, {**unit, **new})
    if "checked" in unit:
        out["checked"] = cast(Any, proof.withdrawn(unit["checked"]))
    return out


def _verdict_now(uid: str, units: Mapping[str, Unit], rejudged: Mapping[str, Rejudged]) -> str:
    """A unit's verdict as judged so far: a finding before may have changed it."""
    return rejudged[uid]["verdict"] if uid in rejudged else units[uid]["verdict"]


def _replay(uid: str, units: Mapping[str, Unit], run_of: Mapping[str, Run]) -> str:
    """The command that reproduces a rank's plan on its unit, on its host."""
    unit = units[uid]
    own = uid.split("/", 1)[1]
    return (
        f"on {unit['host']}: sdcscan run {replay_args(run_of[uid])} --units {own} --budget 15m "
        f"(reproduce; then take {uid} out of service)"
    )


def _references(db: Rows) -> dict[tuple[tuple[tuple[str, int], str], int], str | None]:
    """((plan, cohort), case) -> compare's reference digest (golden, agreed or the hosts' decision), or
    None where the case stays open."""
    groups = {key: ((sha, seed), cohort) for key, sha, seed, cohort, _ in db.rows(COMPARISON_GROUPS)}
    return {(groups[key], i): d for key, i, _, d, _, _ in db.rows(CASE_REFERENCES)}


def _cross_rank_disputes(
    reports: Sequence[HostReport], reference: Mapping[tuple[tuple[tuple[str, int], str], int], str | None]
) -> list[Dispute]:
    """Every case whose digests disagree across ranks, with compare's reference digest where it has one
    (`majority`: golden, agreed or the hosts' decision; None where it stays open or only a host decides)."""
    held: dict[tuple[tuple[str, int], str], dict[int, dict[str, str]]] = {}
    workload: dict[int, str] = {}
    for r in reports:
        for u in r.units:
            cases = held.setdefault((r.plan, u.cohort), {})
            for i, d, w in zip(u.indices, u.digests, u.workloads, strict=True):
                if d is not None:
                    cases.setdefault(i, {})[u.unit] = d
                    workload.setdefault(i, w)
    out: list[Dispute] = []
    for group, cases in sorted(held.items()):
        for i, digests in sorted(cases.items()):
            if len(set(digests.values())) < 2:
                continue
            out.append(
                {
                    "index": i,
                    "workload": workload[i],
                    "cohort": group[1],
                    "digests": dict(sorted(digests.items(), key=lambda kv: unit_order(kv[0]))),
                    "majority": reference.get((group, i)),
                }
            )
    return out


# --------------------------------------------------------------------------------------------------
# Attributions of the distributed workloads.


def _attribution_findings(mismatches: Sequence[Mismatch]) -> list[Finding]:
    """One finding per distinct attribution (the `where` of a distributed workload's mismatch).

    `where` is `LABEL: ATTRIBUTION`, the label saying which step (train_dp) or which collective, dtype
    and size (collective) showed it. A bad hop shows in many cases and on every rank it accuses, so
    findings are keyed by the attribution alone, naming its first case and every rank that reported it.
    """
    seen: dict[str, list[Mismatch]] = {}
    for m in mismatches:
        if m["workload"] in DISTRIBUTED_WORKLOADS and m["where"]:
            seen.setdefault(_attribution(m["where"])[1], []).append(m)
    out = []
    for text, records in list(seen.items())[:MAX_ATTRIBUTION_FINDINGS]:
        first = min(records, key=lambda m: (m["index"], unit_order(m["unit"])))
        label = _attribution(first["where"])[0]
        reporters = sorted({m["unit"] for m in records}, key=unit_order)
        cases = len({m["index"] for m in records})
        out.append(
            finding(
                "attribution",
                None,
                f"{text} ({first['workload']}, {cases} case(s), first case {first['index']}"
                f"{', ' + label if label else ''}; reported by {', '.join(reporters)}).",
            )
        )
    if len(seen) > MAX_ATTRIBUTION_FINDINGS:
        rest = len(seen) - MAX_ATTRIBUTION_FINDINGS
        out.append(finding("attribution", None, f"{rest} more distinct attribution(s) in the mismatches."))
    return out


def _attribution(where: str) -> tuple[str, str]:
    """(label, attribution) of a distributed mismatch's `where`; no label when it has none."""
    label, sep, text = where.partition(": ")
    return (label, text) if sep and text else ("", where)


# --------------------------------------------------------------------------------------------------
# The run, the host, the verdict.


def _run_doc(
    run: Run,
    ranks: Sequence[RankInfo],
    units: Sequence[Unit],
    reports: Sequence[Report],
    backend: str | None,
) -> Run:
    """The given run plus `distributed` and, when a rank was stopped by a signal, `interrupted_by`."""
    verdict_of: dict[int, list[str]] = {}
    for u in units:
        verdict_of.setdefault(u["rank"], []).append(u["verdict"])  # every unit here has its rank
    records: list[RankEntry] = [
        {
            "rank": info.rank,
            "host": info.host,
            "local_rank": info.local_rank,
            "unit": info.unit,
            "device": info.device,
            "report": info.report,
            "verdict": Verdict.worst(verdict_of.get(info.rank, [])).value,
        }
        for info in ranks
    ]
    given = run.get("distributed")
    distributed: Distributed = (
        {**given, "world_size": len(ranks), "ranks": records}
        if isinstance(given, dict)
        else {"world_size": len(ranks), "ranks": records}
    )
    seen = [r["run"].get("distributed") for r in reports]  # a rank report's: where it sat, what it saw
    backend = backend or next((d["backend"] for d in seen if isinstance(d, dict) and d.get("backend")), None)
    if isinstance(backend, str):
        distributed["backend"] = backend
    doc: Run = {**run, "distributed": distributed}
    stopped = [r["run"].get("interrupted_by") for r in reports if _interrupted(r)]
    if not doc.get("interrupted_by") and stopped:
        # SIGTERM first: the cluster was told to stop, and `sdcscan report` then exits 143 as the rank did.
        doc["interrupted_by"] = "SIGTERM" if "SIGTERM" in stopped else next((s for s in stopped if s), None)
    return doc


def _interrupted(report: Report) -> bool:
    return bool(report["verdict"] == Verdict.INTERRUPTED.value or report["run"].get("interrupted_by"))


def _cluster_verdict(units: Sequence[Unit], run: Run, reports: Sequence[Report]) -> Verdict:
    """A host report's rule: interrupted when the cluster or any rank was stopped, else the worst unit
    verdict (so a rank that could not be judged outweighs one that failed, as a unit does on a host)."""
    if run.get("interrupted_by") or any(_interrupted(r) for r in reports):
        return Verdict.INTERRUPTED
    return Verdict.worst(u["verdict"] for u in units)


def _host_doc(ranks: Sequence[RankInfo], first: Report | None) -> Host:
    """The first reporting rank's host facts, named for every host of the world.

    `hostname` joins the hosts (the schema wants one string); `hosts` lists them. A machine id would
    be one machine's, so it is dropped when the world spans several.
    """
    hosts = list(dict.fromkeys(info.host for info in ranks))
    doc: Host = (
        {**first["host"], "hostname": ",".join(hosts), "hosts": hosts}
        if first
        else {"hostname": ",".join(hosts), "hosts": hosts}
    )
    if len(hosts) > 1:
        doc.pop("machine_id", None)
    return doc


def _telemetry(docs: Sequence[tuple[RankInfo, Report]]) -> Telemetry:
    """Each unit's telemetry, and each host's (from its first rank: its ranks share the host's counters)."""
    units: dict[str, Metrics | None] = {}
    hosts: dict[str, Metrics | None] = {}
    for info, doc in docs:
        telemetry = doc.get("telemetry") or {}  # `_renamed` wrote both scopes
        units.update(telemetry.get("units") or {})
        hosts.setdefault(info.host, telemetry.get("host"))
    return {"units": units, "hosts": hosts}


def _unique(findings: Iterable[Finding]) -> list[Finding]:
    """The findings in order, each (kind, unit, message) once: ranks of one host repeat host findings."""
    seen: set[tuple[str, str | None, str]] = set()
    out = []
    for f in findings:
        key = (f["kind"], f["unit"], f["message"])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
