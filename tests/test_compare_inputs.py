"""Inputs an operator actually has (issue 12, items 5 and 6, and the Time findings).

gzip and any-case suffixes, symbolic links to directories (loops included), every input that is not
read listed with its reason, the inventory (unlisted hosts named, case/domain near-matches), reports
dated in the future, reports that test nothing, the stale boundary, reading in a pool of processes,
reports parsed unit by unit, and `compare` keeping its exit-code and JSON-first contracts.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import zlib
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import sdcscan.fleet.reading as reading
import sdcscan.fleet.report_file as report_file
from sdcscan.cli.fleet import compare, golden
from sdcscan.errors import ReportError
from sdcscan.fleet.compare import Options, summarize
from sdcscan.fleet.findings import Collector
from sdcscan.fleet.host_coverage import (
    FUTURE_SKEW_S,
    distinct_days,
    future_findings,
    match_inventory,
    name_key,
)
from sdcscan.fleet.model import Extractor, parse_time
from sdcscan.fleet.reading import expand_paths, read_report, read_reports
from sdcscan.fleet.report_file import gunzip
from sdcscan.render.fleet import render_compare
from tests.helpers.fleet import extract, report, unit
from tests.helpers.reports import make_report

NOW_TEXT = "2025-06-02T00:00:00Z"
NOW = parse_time(NOW_TEXT)
DAY = 86400.0


def iso(t: float) -> str:
    """POSIX seconds -> the reports' time format (with fractions of a second when there are any)."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def put(path: Path, doc: dict[str, Any] | str | bytes) -> Path:
    """Write a report (dict), text or bytes to `path`, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def cli(*args: str) -> Result:
    return CliRunner().invoke(compare, [*args, "--now", NOW_TEXT])


def skipped_of(result: Result, root: Path) -> dict[str, str]:
    """`compare --json` skipped inputs: path relative to `root` -> reason."""
    assert result.exit_code in (0, 1), result.stderr
    return {os.path.relpath(s["path"], root): s["reason"] for s in json.loads(result.stdout)["skipped"]}


def hosts_of(reports: list[Any]) -> list[str]:
    return sorted(r.host for r in reports)


# ---------------------------------------------------------------------------------------------------
# File names, gzip, links, special files.


def test_gzip_and_any_case_suffixes_are_read(tmp_path: Path):
    """`.json.gz`, `.JSON`, `.Json.GZ` in a directory are reports; a gzip file is read whatever its name."""
    put(tmp_path / "r" / "a.json", report("a"))
    put(tmp_path / "r" / "b.JSON", report("b"))
    put(tmp_path / "r" / "c.json.gz", gzip.compress(json.dumps(report("c")).encode()))
    put(tmp_path / "r" / "sub" / "d.Json.GZ", gzip.compress(json.dumps(report("d")).encode()))
    named = put(tmp_path / "e.report", gzip.compress(json.dumps(report("e")).encode()))
    reports, skipped = read_reports([str(tmp_path / "r"), str(named)])
    assert hosts_of(reports) == ["a", "b", "c", "d", "e"] and skipped == []


def test_a_gzip_copy_of_a_report_is_a_duplicate_of_it(tmp_path: Path):
    """The content hash is of the decompressed bytes: `r.json` and `r.json.gz` are one report."""
    text = json.dumps(report("a")).encode()
    put(tmp_path / "r.json", text)
    put(tmp_path / "r.json.gz", gzip.compress(text))
    reports, skipped = read_reports([str(tmp_path)])
    s = summarize(reports, skipped=skipped)
    assert s.counts["reports"] == 1
    assert [x.reason.endswith("(identical content)") for x in s.skipped] == [True]


def test_gzip_bomb_corrupt_and_truncated_gzip_are_skipped_with_reasons(tmp_path: Path, monkeypatch):
    """A file that unpacks beyond the bound stops there (a bomb); corrupt and cut gzip data say so."""
    monkeypatch.setattr(report_file, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    put(tmp_path / "ok.json.gz", gzip.compress(json.dumps(report("ok")).encode()))
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of spaces in about 8 KB
    put(tmp_path / "bomb.json.gz", bomb)
    whole = gzip.compress(json.dumps(report("cut")).encode())
    put(tmp_path / "cut.json.gz", whole[: len(whole) // 2])
    put(tmp_path / "bad.json.gz", b"\x1f\x8b" + b"\x00" * 40)
    put(tmp_path / "tail.json.gz", gzip.compress(json.dumps(report("t")).encode()) + b"garbage")
    # Inside gzip, the reasons of plain files: too large, not JSON, not a report, another schema.
    put(tmp_path / "big.json.gz", gzip.compress(json.dumps(report("big", [unit(cases=3000)])).encode()))
    put(tmp_path / "junk.json.gz", gzip.compress(b"hello"))
    put(tmp_path / "list.json.gz", gzip.compress(b"[1]"))
    put(tmp_path / "v9.json.gz", gzip.compress(json.dumps({**report("v9"), "schema_version": 9}).encode()))
    monkeypatch.setattr(report_file, "MAX_REPORT_BYTES", 20_000)  # bounds the compressed file
    reports, skipped = read_reports([str(tmp_path)])
    reasons = {Path(s.path).name: s.reason for s in skipped}
    assert hosts_of(reports) == ["ok"]
    assert reasons == {
        "bomb.json.gz": f"decompresses to more than {1 << 20} bytes, the limit for a report (a gzip bomb?)",
        "cut.json.gz": "truncated gzip data",
        "bad.json.gz": "corrupt gzip data (not a report)",
        "tail.json.gz": "trailing garbage after the gzip data",
        "big.json.gz": reasons["big.json.gz"],
        "junk.json.gz": "truncated or not JSON",
        "list.json.gz": "not a report (top level is not an object)",
        "v9.json.gz": "schema_version 9 is not supported (this sdcscan reads 1)",
    }
    assert reasons["big.json.gz"].endswith("is too large for a report (the limit is 20000 bytes)")


def test_gunzip_reads_every_member_and_stops_at_the_bound():
    """Concatenated members unpack like `gzip` does; the output never exceeds the bound plus one byte."""
    assert gunzip(gzip.compress(b"ab") + gzip.compress(b"cd") + b"\0\0", 10) == b"abcd"
    assert gunzip(gzip.compress(b"x" * 10), 10) == b"x" * 10
    with pytest.raises(ReportError, match="more than 9 bytes"):
        gunzip(gzip.compress(b"x" * 10), 9)
    big = zlib.compress(b"")  # zlib, not gzip: refused as corrupt
    with pytest.raises(ReportError, match="corrupt gzip"):
        gunzip(b"\x1f\x8b" + big, 10)


def test_symlinked_directories_are_followed_once_and_loops_are_listed(tmp_path: Path):
    """reports/current -> W23 is read (once), a link back to an enclosing directory is a listed loop."""
    root = tmp_path / "reports"
    put(root / "W22" / "a.json", report("a", run_id="w22"))
    put(root / "W23" / "b.json", report("b"))
    outside = put(tmp_path / "elsewhere" / "c.json", report("c"))
    (root / "current").symlink_to("W23")
    (root / "archive").symlink_to(outside.parent)  # a directory outside the tree: followed
    (root / "W23" / "loop").symlink_to("..")
    (root / "self").symlink_to("self")
    put(root / "week24" / "d.json", report("d"))
    (root / "latest").symlink_to("week24")  # the link sorts first; the directory keeps its own name
    result = cli(str(root), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["counts"]["reports"] == 4
    assert skipped_of(result, root) == {
        "current": f"same directory as {root / 'W23'} (read once)",
        "latest": f"same directory as {root / 'week24'} (read once)",
        "W23/loop": f"symbolic link loop: leads back to {root}",
        "self": "symbolic link loop (the link leads back to itself)",
    }
    reports, _ = read_reports([str(root)])
    assert sorted(os.path.relpath(r.source, root) for r in reports) == [
        "W22/a.json",
        "W23/b.json",
        "archive/c.json",
        "week24/d.json",
    ]


def test_a_symlinked_directory_named_alone_is_walked(tmp_path: Path):
    """A link to a directory given on the command line is followed like the directory."""
    put(tmp_path / "W23" / "b.JSON", report("b"))
    (tmp_path / "current").symlink_to("W23")
    reports, skipped = read_reports([str(tmp_path / "current")])
    assert hosts_of(reports) == ["b"] and skipped == []
    assert reports[0].source == str(tmp_path / "current" / "b.JSON")


def test_the_same_file_under_two_names_is_read_once_and_listed(tmp_path: Path):
    """A link or hard link to a report is the same file: the plain name is read, the other listed."""
    good = put(tmp_path / "r" / "run3.json", report("a"))
    (tmp_path / "r" / "latest.json").symlink_to("run3.json")
    os.link(good, tmp_path / "r" / "hard.json")
    reports, skipped = read_reports([str(tmp_path / "r")])
    assert [r.source for r in reports] == [str(tmp_path / "r" / "hard.json")]
    assert {Path(s.path).name: s.reason for s in skipped} == {
        "latest.json": f"same file as {tmp_path / 'r' / 'hard.json'} (read once)",
        "run3.json": f"same file as {tmp_path / 'r' / 'hard.json'} (read once)",
    }
    # Named twice in the same spelling (directly, by a glob, by its directory) is one input, not a duplicate.
    alone = put(tmp_path / "s" / "a.json", report("a"))
    files, skipped = expand_paths([str(alone), str(alone), str(tmp_path / "s" / "*.json"), str(alone.parent)])
    assert files == [str(alone)] and skipped == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_dangling_links_fifos_devices_and_sockets_are_listed_not_read(tmp_path: Path):
    """Nothing that is not a regular file is opened; each is listed with what it is."""
    root = tmp_path / "r"
    put(root / "ok.json", report("ok"))
    os.mkfifo(root / "pipe.json")
    (root / "null.json").symlink_to(os.devnull)
    (root / "gone.json").symlink_to("deleted.json")
    (root / "old-week").symlink_to("W01")  # a dangling link to a directory: listed whatever its name
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "s.json"))
        result = cli(str(root), "--json")
    finally:
        sock.close()
    assert skipped_of(result, root) == {
        "gone.json": "dangling symbolic link (to deleted.json, which does not exist)",
        "old-week": "dangling symbolic link (to W01, which does not exist)",
        "null.json": "is a character device, not a regular file (a report is read from a file)",
        "pipe.json": "is a FIFO (named pipe), not a regular file (a report is read from a file)",
        "s.json": "is a socket, not a regular file (a report is read from a file)",
    }


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_on_the_command_line_says_what_it_is(tmp_path: Path):
    """Named directly, a FIFO is refused without opening it: its reason, not "no such file"."""
    put(tmp_path / "ok.json", report("ok"))
    os.mkfifo(tmp_path / "p")
    result = cli(str(tmp_path / "ok.json"), str(tmp_path / "p"), "--json")
    assert skipped_of(result, tmp_path) == {
        "p": "is a FIFO (named pipe), not a regular file (a report is read from a file)"
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_files_and_directories_are_listed(tmp_path: Path):
    """Permission denied on a file or a directory: listed, the rest is read."""
    root = tmp_path / "r"
    put(root / "ok.json", report("ok"))
    locked = put(root / "locked.json", report("x"))
    put(root / "closed" / "y.json", report("y"))
    locked.chmod(0)
    (root / "closed").chmod(0)
    try:
        reports, skipped = read_reports([str(root)])
    finally:
        (root / "closed").chmod(0o755)
    assert hosts_of(reports) == ["ok"]
    assert {Path(s.path).name: s.reason for s in skipped} == {
        "locked.json": "cannot read report: Permission denied",
        "closed": "cannot read directory: Permission denied",
    }


def test_files_with_other_names_are_counted_once_per_directory(tmp_path: Path):
    """A directory's other files are not read, and one line says how many and gives an example."""
    put(tmp_path / "r" / "a.json", report("a"))
    put(tmp_path / "r" / "notes.txt", "x")
    put(tmp_path / "r" / "sub" / "a.json.bz2", "x")
    put(tmp_path / "empty" / "README", "x")
    reports, skipped = read_reports([str(tmp_path / "r"), str(tmp_path / "empty")])
    assert hosts_of(reports) == ["a"]
    assert [(Path(s.path).name, s.reason) for s in skipped] == [
        (
            "empty",
            "directory holds no *.json or *.json.gz file (1 other file(s) not read: their names do not end "
            "in .json or .json.gz (e.g. README))",
        ),
        ("r", "2 other file(s) not read: their names do not end in .json or .json.gz (e.g. notes.txt)"),
    ]


# ---------------------------------------------------------------------------------------------------
# Reading in a pool of processes, and large reports unit by unit.


def test_reading_with_one_or_two_workers_gives_the_same_result(tmp_path: Path):
    """Same extracts, same order, same skipped list, byte-identical `compare --json`."""
    for k in range(12):
        put(
            tmp_path / "r" / f"d{k % 3}" / f"h{k}.json",
            report(f"h{k}", [unit(digests={1: "f" * 16})] if k == 5 else None),
        )
    put(tmp_path / "r" / "bad.json", "{")
    one = read_reports([str(tmp_path / "r")], workers=1)
    two = read_reports([str(tmp_path / "r")], workers=2)
    assert one == two and len(one[0]) == 12 and [s.path for s in one[1]] == [str(tmp_path / "r" / "bad.json")]
    outputs = {cli(str(tmp_path / "r"), "--json", "--jobs", str(j)).stdout for j in (1, 2)}
    assert len(outputs) == 1 and '"divergent"' in outputs.pop()


def test_many_files_are_read_by_a_pool_by_default(tmp_path: Path, monkeypatch):
    """Above POOL_MIN_FILES the pool is used without asking; the extracts are still shared (interned)."""
    for k in range(6):
        put(tmp_path / f"h{k}.json", report(f"h{k}"))
    used: list[int] = []
    real = reading._read_all

    def spy(files: list[str], workers: int) -> Any:
        used.append(workers)
        return real(files, workers)

    monkeypatch.setattr(reading, "POOL_MIN_FILES", 2)
    monkeypatch.setattr(reading, "CHUNK_FILES", 1)  # every file in its own task: nothing shared by pickle
    monkeypatch.setattr(reading, "_read_all", spy)
    monkeypatch.setattr(reading.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    reports, _ = read_reports([str(tmp_path)])
    assert used == [2] and hosts_of(reports) == [f"h{k}" for k in range(6)]
    assert reports[0].units[0].digests is reports[5].units[0].digests


def _big_fleet_docs() -> list[dict[str, Any]]:
    spoiled = make_report()
    spoiled["units"][1]["cases"]["seconds"][3] = "x"
    twice = make_report(fail_unit=None)
    twice["units"][1]["id"] = twice["units"][0]["id"]
    return [
        make_report(),  # a failing unit: mismatch records and findings name it
        make_report(fail_unit=None),
        json.loads((Path(__file__).parent / "data" / "report_v1.json").read_text()),
        report("empty", units=[]),
        spoiled,
        twice,
        {**make_report(), "golden_version": 1},
    ]


@pytest.mark.parametrize("k", range(7))
def test_a_large_report_read_unit_by_unit_gives_the_same_extract(tmp_path: Path, monkeypatch, k: int):
    """The unit-by-unit parser (used above STREAM_UNITS_ABOVE) equals the whole-document one, refusals too."""
    path = put(tmp_path / "r.json", json.dumps(_big_fleet_docs()[k], indent=1))
    outcomes: list[object] = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(report_file, "STREAM_UNITS_ABOVE", threshold)
        try:
            outcomes.append(read_report(str(path), Extractor()))
        except ReportError as err:
            outcomes.append(str(err))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    "text",
    ['{"units": [1 2]}', '{"units": [], "units": []}', "[]", '{"a": 1} x', '{"units": [{"id": "a"}', "  "],
)
def test_the_unit_by_unit_parser_hands_odd_text_to_the_whole_document_parser(tmp_path, monkeypatch, text):
    """Whatever the unit-by-unit walk cannot follow gets the whole-document parser's own reason."""
    path = put(tmp_path / "r.json", text)
    reasons = []
    for threshold in (1 << 40, 0):
        monkeypatch.setattr(report_file, "STREAM_UNITS_ABOVE", threshold)
        with pytest.raises(ReportError) as err:
            read_report(str(path), Extractor())
        reasons.append(str(err.value))
    assert reasons[0] == reasons[1]


# ---------------------------------------------------------------------------------------------------
# The inventory.


def test_name_key():
    """Case and domain suffix are ignored; IP addresses are compared whole."""
    assert name_key("node1") == name_key("NODE1.example.com") == name_key("Node1.") == "node1"
    assert name_key("10.0.0.1") != name_key("10.0.0.2")
    assert name_key("fe80::1") == "fe80::1"


def test_unlisted_hosts_are_named_and_counted():
    """Hosts that reported but are not in the inventory are findings, one per host, not a bare count."""
    s = summarize(extract([report("a"), report("x"), report("y")]), options=Options(hosts=("a",), now=NOW))
    assert [(f.host, f.kind) for f in s.findings] == [("x", "unlisted"), ("y", "unlisted")]
    assert "not in the --hosts inventory" in s.findings[0].evidence["reason"]
    assert s.counts["unlisted_hosts"] == 2 and s.exit_code == 0


def test_a_name_differing_only_by_case_or_domain_counts_as_the_listed_host():
    """`NODE1.example.com` reporting for inventory `node1`: covered, with an alias finding saying so."""
    fleet = [report("NODE1.example.com"), report("node2")]
    s = summarize(extract(fleet), options=Options(hosts=("node1", "node2"), now=NOW))
    assert [(f.host, f.kind) for f in s.findings] == [("node1", "alias")]
    assert s.findings[0].evidence["reported_as"] == "NODE1.example.com"
    assert s.counts["unlisted_hosts"] == 0
    # Its coverage is judged from the aliased reports: an old one is stale under the inventory's name.
    old = [report("Node1", ended_at="2025-01-01T00:00:00Z")]
    s = summarize(extract(old), options=Options(hosts=("node1",), now=NOW))
    assert sorted((f.host, f.kind) for f in s.findings) == [("node1", "alias"), ("node1", "stale")]


def test_ambiguous_near_matches_are_not_merged_but_named():
    """Two reported names for one inventory entry: nothing merged; missing and unlisted name each other."""
    fleet = [report("node1.a.example"), report("NODE1.b.example")]
    s = summarize(extract(fleet), options=Options(hosts=("node1",), now=NOW))
    kinds = {(f.host, f.kind): f.evidence["reason"] for f in s.findings}
    assert set(kinds) == {
        ("node1", "missing"),
        ("node1.a.example", "unlisted"),
        ("NODE1.b.example", "unlisted"),
    }
    assert "near-matches that reported: NODE1.b.example, node1.a.example" in kinds[("node1", "missing")]
    assert "near-matches in the inventory: node1" in kinds[("node1.a.example", "unlisted")]


def test_ip_addresses_are_never_near_matches():
    """10.0.0.2 reporting does not cover 10.0.0.1."""
    s = summarize(extract([report("10.0.0.2")]), options=Options(hosts=("10.0.0.1",), now=NOW))
    assert [(f.host, f.kind) for f in s.findings] == [("10.0.0.1", "missing"), ("10.0.0.2", "unlisted")]


def test_match_inventory_prefers_exact_names():
    """An exact match is never replaced by a near one; the leftover near-match is unlisted."""
    m = match_inventory(["node1"], ["node1", "NODE1"])
    assert m.reported_as == {"node1": "node1"} and m.unlisted == ("NODE1",)


_HOST_NAMES = st.sampled_from(["node1", "node2", "gpu-7", "10.0.0.1", "10.0.0.2", "fe80::1"])
_SPELLINGS = st.sampled_from(["{}", "{}.a.example", "{}.B.example", "{}."])


@st.composite
def _names(draw: st.DrawFn) -> list[str]:
    """Hostnames of a few hosts, each spelled as it is or with another case or domain."""
    names = [draw(_SPELLINGS).format(draw(_HOST_NAMES)) for _ in range(draw(st.integers(0, 8)))]
    return [n.upper() if draw(st.booleans()) else n for n in names]


@settings(max_examples=300, deadline=None)
@given(hosts=_names(), reported=_names())
def test_match_inventory_follows_its_rules_on_any_spelling(hosts: list[str], reported: list[str]):
    """Every rule of the matching, stated over all names at once: exact first; a leftover pair merged
    only when it is the one leftover of its key on each side; every other name of a leftover's key is
    its near-match."""
    m = match_inventory(hosts, reported)
    listed, seen = set(hosts), set(reported)
    spare_listed, spare_seen = listed - seen, seen - listed
    merged = {}
    for name in spare_listed:
        mine = [h for h in spare_listed if name_key(h) == name_key(name)]
        theirs = [h for h in spare_seen if name_key(h) == name_key(name)]
        if len(mine) == 1 and len(theirs) == 1:
            merged[name] = theirs[0]
    assert m.reported_as == {**{h: h for h in listed & seen}, **merged}
    assert m.unlisted == tuple(sorted(spare_seen - set(merged.values())))
    for name in spare_listed | spare_seen:
        same_key = {h for h in listed | seen if name_key(h) == name_key(name)}
        assert set(m.near(name)) == same_key - {name}, name


def test_matching_a_big_inventory_holds_little_beyond_its_two_sets():
    """100,000 names, 1,000 of them missing: the matching peaked at 54 MB of Python objects when it
    grouped every name by its key (half a gigabyte at a million hosts); now only the names without an
    exact match are grouped, 17.5 MB (Python 3.11)."""
    import tracemalloc

    hosts = [f"node{i:06d}.dc1.example.com" for i in range(100_000)]
    tracemalloc.start()
    try:
        m = match_inventory(hosts, [*hosts[:99_000], "NODE099999.dc1.example.com"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30 * 2**20, peak
    assert len(m.reported_as) == 99_001 and m.unlisted == ()  # the near name stands for its host


# ---------------------------------------------------------------------------------------------------
# Time.


def test_a_report_from_the_future_is_a_warning_and_not_fresh():
    """400 days ahead: a `future` warning; it does not cover its host, whose older report still can."""
    ahead = report("clock", run_id="ahead", ended_at=iso(NOW + 400 * DAY))
    s = summarize(extract([ahead]), options=Options(hosts=("clock",), now=NOW))
    found = {f.kind: f.evidence for f in s.findings}
    assert sorted(found) == ["future", "missing"] and s.exit_code == 0
    assert found["future"]["days_ahead"] == 400.0 and "clock is wrong" in found["future"]["reason"]
    assert "in the future" in found["missing"]["reason"]
    # An older report of another plan is current too: it covers the host, and it is old.
    older = report("clock", run_id="older", seed=8, ended_at=iso(NOW - 90 * DAY))
    s = summarize(extract([ahead, older]), options=Options(hosts=("clock",), now=NOW))
    assert sorted(f.kind for f in s.findings) == ["future", "stale"]


def test_coverage_counts_an_older_report_of_the_same_plan_behind_a_future_one():
    """coverage_findings given every report of a host: the future one is set aside, the older one counts."""
    ahead = report("clock", run_id="ahead", ended_at=iso(NOW + 400 * DAY))
    older = report("clock", run_id="older", ended_at=iso(NOW - 10 * DAY))
    s = summarize(extract([ahead, older]), options=Options(hosts=("clock",), now=NOW, stale_s=60 * DAY))
    assert [f.kind for f in s.findings] == ["future"] and s.counts["unlisted_hosts"] == 0


def test_a_small_clock_skew_is_not_the_future():
    """Within FUTURE_SKEW_S of now: no warning, and the report is fresh."""
    near = report("h", ended_at=iso(NOW + FUTURE_SKEW_S))
    s = summarize(extract([near]), options=Options(hosts=("h",), now=NOW))
    assert s.findings == ()
    col = Collector()
    future_findings(extract([report("h", ended_at=iso(NOW + FUTURE_SKEW_S + 1))]), col, now=NOW)
    assert [f.kind for f in col.findings()] == ["future"]


def test_exactly_the_stale_limit_is_fresh_and_one_second_more_is_stale():
    """60 days old is not stale; 60 days + 1 s is, and the ages shown differ."""
    exact = report("h", ended_at=iso(NOW - 60 * DAY))
    assert summarize(extract([exact]), options=Options(hosts=("h",), now=NOW)).findings == ()
    late = report("h", ended_at=iso(NOW - 60 * DAY - 1))
    (f,) = summarize(extract([late]), options=Options(hosts=("h",), now=NOW)).findings
    assert f.kind == "stale" and f.evidence["age_days"] > f.evidence["stale_after_days"]
    assert (f.evidence["age_days"], f.evidence["stale_after_days"]) == (60.00001, 60.0)


def test_the_stale_message_never_shows_the_limit_as_the_age():
    """The human line says `60.00001 days old (limit 60.0)`, never `60.0 days old (limit 60.0)`."""
    late = report("h", ended_at=iso(NOW - 60 * DAY - 1))
    buf = StringIO()
    render_compare(
        summarize(extract([late]), options=Options(hosts=("h",), now=NOW)),
        Console(file=buf, width=200, no_color=True),
    )
    assert "60.00001 days old (limit 60.0)" in buf.getvalue()
    assert "60.0 days old (limit 60.0)" not in buf.getvalue()


@pytest.mark.parametrize(
    ("age", "limit", "shown"),
    [
        (93 * DAY, 60 * DAY, (93.0, 60.0)),
        (60 * DAY + 1, 60 * DAY, (60.00001, 60.0)),
        (60 * DAY + 1e-3, 60 * DAY, (60.00000001, 60.0)),
        (2.0, 1.0, (0.00002, 0.00001)),
        (0.1237 * DAY, 0.1236 * DAY, (0.1237, 0.1236)),
    ],
)
def test_distinct_days(age: float, limit: float, shown: tuple[float, float]):
    """The fewest decimals (at least one) that show the age above the limit."""
    assert distinct_days(age, limit) == shown


# ---------------------------------------------------------------------------------------------------
# Reports that test nothing.


@pytest.mark.parametrize(
    ("units", "why"),
    [
        ([], "it has no unit"),
        ([unit("cpu:0", cases=0), unit("cpu:1", cases=0)], "its units ran no case"),
        ([unit("cpu:0", digests=dict.fromkeys(range(4)))], "left no digest"),
        ([unit("cpu:0", statuses=dict.fromkeys(range(4), "error"))], "left no digest"),
    ],
    ids=["no-units", "no-cases", "null-digests", "all-errors"],
)
def test_a_report_that_tested_nothing_does_not_cover_its_host(units: list[dict[str, Any]], why: str):
    """The host is missing, and the reason names the report and what it lacked. The other side: one unit
    with digests covers its host, and so does a unit whose cases all failed their checks (it tested)."""
    mixed = report("a", [unit("cpu:0"), unit("cpu:1", cases=0)])
    caught = report(
        "b", [unit("cpu:0", statuses=dict.fromkeys(range(4), "mismatch"), mismatches=4, verdict="fail")]
    )
    fleet = extract([report("h", units), mixed, caught])
    s = summarize(fleet, options=Options(hosts=("h", "a", "b"), now=NOW))
    (f,) = [f for f in s.findings if f.kind in ("missing", "stale")]
    assert (f.host, f.kind) == ("h", "missing") and why in f.evidence["reason"], f.evidence
    assert "h.json" in f.evidence["reason"]


# ---------------------------------------------------------------------------------------------------
# The command: JSON first, internal errors exit 3, text shown literally.


def test_an_internal_error_exits_3_with_one_line(tmp_path: Path, monkeypatch):
    """A bug in summarize is exit 3 and one `Error: internal error` line: never 1, never a traceback."""

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    put(tmp_path / "a.json", report("a"))
    monkeypatch.setattr("sdcscan.fleet.compare.compare_files", boom)  # the command imports it when it runs
    result = cli(str(tmp_path), "--json")
    assert result.exit_code == 3 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: internal error (RuntimeError: boom)"), lines
    # `golden record` keeps the same contract.
    monkeypatch.setattr("sdcscan.fleet.golden_record.record_extracted", boom)
    result = CliRunner().invoke(golden, ["record", str(tmp_path), "-o", str(tmp_path / "g.json")])
    assert result.exit_code == 3 and result.stderr.startswith("Error: internal error (RuntimeError: boom)")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_json_is_written_before_anything_is_drawn(tmp_path: Path, monkeypatch):
    """A failure while drawing leaves the whole JSON on stdout (written first) and exits 3."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("evidence")

    put(tmp_path / "a.json", report("a"))
    monkeypatch.setattr("sdcscan.render.fleet.render_compare", broken)
    result = cli(str(tmp_path), "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["counts"]["reports"] == 1
    assert result.stderr.startswith("Error: internal error (KeyError")


@pytest.mark.parametrize(
    "name", ["[/]", "[bold red]x[/bold red]", "h\x1b[2J\x1b]0;pwned\x07\x9b2J", "h\u202e"]
)
def test_unlisted_and_inventory_names_are_shown_literally(tmp_path: Path, name: str):
    """An unlisted host and a missing inventory entry with markup or escapes: printed as typed (control
    characters escaped) in the findings table, exact in the JSON."""
    put(tmp_path / "r" / "a.json", report(name))
    hosts = put(tmp_path / "hosts.txt", "[red]gone[/red]\n")
    result = CliRunner().invoke(
        compare,
        [str(tmp_path / "r"), "--hosts", str(hosts), "--now", NOW_TEXT, "--json"],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.stderr
    found = {(f["host"], f["kind"]) for f in json.loads(result.stdout)["findings"]}
    assert found == {(name, "unlisted"), ("[red]gone[/red]", "missing")}
    lines = [ln for ln in result.stderr.splitlines() if "│ unlisted │" in ln]
    assert len(lines) == 1 and "[red]gone[/red]" in result.stderr
    assert not any(c in result.stderr for c in "\x1b\x07\x9b\u202e")
    assert (name if name.isprintable() else name.encode("unicode_escape").decode()[:6]) in lines[0]
