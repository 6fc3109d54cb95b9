"""`sdcscan golden record`: the fleet's reference digest of every (plan, cohort, case), as `compare` takes
it with no golden (`fleet.sql_steps`: the only digest, else the hosts' decision, one vote per host from its
newest report of the plan). A case the hosts do not settle is refused with the reason, so one many-unit
host, or re-runs of one host, cannot write its digests into the golden."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sdcscan import __version__
from sdcscan.fleet.compare import judged_reports
from sdcscan.fleet.consensus import why_undecided
from sdcscan.fleet.golden import GOLDEN_VERSION, Golden, GoldenCases, GoldenPlan, RefusedCase
from sdcscan.fleet.model import Extractor, HostReport, Skipped
from sdcscan.fleet.records import duplicates
from sdcscan.fleet.sql_steps import CASE_REFERENCES, COMPARISON_GROUPS, GROUP_UNITS, OPEN_CASE_HOSTS


def record(reports: Iterable[object], *, min_votes: int = 1) -> Golden:
    """Build a golden from parsed report documents (duplicates of one host and run count once).

    Raises:
        ReportError: a document is not a usable report.
    """
    ex = Extractor()
    return record_extracted(
        [ex.extract(r, source=f"report {n}") for n, r in enumerate(reports)], min_votes=min_votes
    )[0]


def record_extracted(reports: Sequence[HostReport], *, min_votes: int = 1) -> tuple[Golden, list[Skipped]]:
    """A golden from extracted reports (what `sdcscan golden record` reads), and the duplicates left out.

    Args:
        min_votes: fewest units that must have produced the reference digest for a case to be recorded.

    `votes` and `voters` count units: those that produced the recorded digest, and all that ran the case.
    """
    with judged_reports(reports) as db:
        groups = {key: ((sha, seed), cohort) for key, sha, seed, cohort, _ in db.rows(COMPARISON_GROUPS)}
        units = dict(db.rows(GROUP_UNITS))
        cases: dict[int, list[tuple[int, int, str | None, int | None, str]]] = {}
        for key, index, voters, digest, votes, workload in db.rows(CASE_REFERENCES):
            cases.setdefault(key, []).append((index, voters, digest, votes, workload))
        hosts: dict[tuple[int, int], dict[str, int]] = {}
        for key, index, digest_key, held in db.rows(OPEN_CASE_HOSTS):
            hosts.setdefault((key, index), {})[str(digest_key)] = held
        current = db.rows("SELECT COUNT(*) FROM current_reports")[0][0]
        dups = duplicates(db)
    entries: list[GoldenPlan] = []
    refused: list[RefusedCase] = []
    for key in sorted(units, key=lambda g: groups[g]):
        (sha, seed), cohort = groups[key]
        cols: GoldenCases = {"index": [], "workload": [], "digest": [], "votes": [], "voters": []}
        for index, voters, digest, votes, workload in sorted(cases.get(key, [])):
            if digest is None or votes is None or votes < min_votes:
                reason = (
                    why_undecided(hosts.get((key, index), {}), host_abstained=False)
                    if digest is None
                    else f"only {votes} unit(s) produced it; at least {min_votes} required"
                )
                refused.append(
                    {
                        "profile_sha256": sha,
                        "seed": seed,
                        "cohort": cohort,
                        "index": index,
                        "workload": workload,
                        "reason": reason,
                    }
                )
                continue
            cols["index"].append(index)
            cols["workload"].append(workload)
            cols["digest"].append(digest)
            cols["votes"].append(votes)
            cols["voters"].append(voters)
        if cols["index"]:
            entries.append(
                {"profile_sha256": sha, "seed": seed, "cohort": cohort, "units": units[key], "cases": cols}
            )
    golden: Golden = {
        "golden_version": GOLDEN_VERSION,
        "tool": {"name": "sdcscan", "version": __version__},
        "reports": current,
        "entries": entries,
        "refused": refused,
    }
    return golden, dups
