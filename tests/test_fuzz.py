"""Fuzzing the loaders of untrusted files: profiles and reports fail only with their clean errors, never a traceback."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

import sdcscan.fleet.report_file as report_file
from sdcscan.errors import ProfileError, ReportError
from sdcscan.fleet.compare import summarize
from sdcscan.fleet.model import Extractor, HostReport
from sdcscan.fleet.reading import read_report
from sdcscan.fleet.summary import FAILING_KINDS
from sdcscan.profile import Profile, load_profile, profile_from_data
from sdcscan.render.fleet import render_compare
from sdcscan.report import load_report, validate_report
from tests.helpers.hostile import COMPANION, MUTATIONS, field_paths, mutated_text
from tests.helpers.profiles import HOSTILE_PROFILES
from tests.helpers.reports import make_report as _good_report

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
# Text built from YAML's own syntax, so the parser gets deep instead of failing at the first byte.
yaml_tokens = st.sampled_from(
    ["version: 1\n", "workloads:\n", "  - name: train\n", "    params: {", "}", "[", "]", "&a ", "*a", "!!python/object ",
     "budget: ", "1e999", "-", " ", "\n", ":", "'", '"', "\t", "seed: ", "? ", "|", ">", "%YAML 1.2\n", "---\n", "..."]
)  # fmt: skip


def _load_profile_text(tmp_path: Path, data: bytes) -> Profile | None:
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    try:
        return load_profile(str(path))
    except ProfileError:
        return None


@FUZZ
@given(data=st.binary(max_size=2000))
def test_profile_loader_survives_arbitrary_bytes(tmp_path, data):
    """Random bytes give a Profile or ProfileError."""
    _load_profile_text(tmp_path, data)


@FUZZ
@given(parts=st.lists(yaml_tokens, max_size=40))
def test_profile_loader_survives_yaml_shaped_text(tmp_path, parts):
    """Text made of YAML syntax gives a Profile or ProfileError."""
    _load_profile_text(tmp_path, "".join(parts).encode())


@FUZZ
@given(data=json_like)
def test_profile_validation_survives_arbitrary_documents(data):
    """Any parsed document gives a Profile or ProfileError."""
    with contextlib.suppress(ProfileError):
        profile_from_data(data, label="fuzz.yaml", default_name="fuzz")


@FUZZ
@given(key=st.sampled_from(["version", "name", "budget", "seed", "threads_per_unit", "units", "retest", "workloads"]),
       value=json_like, where=st.sampled_from(["top", "workload", "params"]))  # fmt: skip
def test_profile_validation_survives_one_bad_value_in_a_good_profile(key, value, where):
    """A valid profile with one value replaced gives a Profile or a ProfileError naming the file."""
    doc = {
        "version": 1,
        "budget": "60s",
        "workloads": [{"name": "train", "params": {}}, {"name": "matmul_golden"}],
    }
    target = {"top": doc, "workload": doc["workloads"][0], "params": doc["workloads"][0]["params"]}[where]
    target[key if where == "top" else str(key)] = value
    try:
        profile_from_data(doc, label="fuzz.yaml", default_name="fuzz")
    except ProfileError as err:
        assert "fuzz.yaml" in str(err)


@pytest.mark.parametrize("name", sorted(HOSTILE_PROFILES))
def test_hostile_profiles_are_refused_with_one_clear_line(tmp_path, name):
    """Classic attacks on YAML loaders end in a one-line ProfileError naming the file."""
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE_PROFILES[name])
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert "hostile.yaml" in str(info.value) and "\n" not in str(info.value)


@FUZZ
@given(data=st.binary(max_size=3000))
def test_report_loader_survives_arbitrary_bytes(tmp_path, data):
    """Random bytes give a report or ReportError."""
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with contextlib.suppress(ReportError):
        load_report(path)


@FUZZ
@given(data=json_like)
def test_report_validation_survives_arbitrary_documents(data):
    """Any JSON document gives a report or ReportError."""
    with contextlib.suppress(ReportError):
        validate_report(data)


@FUZZ
@given(path=st.sampled_from(["verdict", "units", "units.0", "units.0.cases", "units.0.cases.index", "schema_version"]),
       value=json_like)  # fmt: skip
def test_report_validation_survives_one_bad_value_in_a_good_report(path, value):
    """A valid report with one value replaced is accepted or refused with ReportError."""
    doc = _good_report()
    *parents, last = path.split(".")
    target = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    target[int(last) if last.isdigit() else last] = value
    with contextlib.suppress(ReportError):
        validate_report(doc)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "truncated"),
        (json.dumps(_good_report()).encode()[:-7], "truncated"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8"),
        (json.dumps({**_good_report(), "schema_version": 99}).encode(), "schema_version 99"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (b"[1, 2, 3]", "not a report"),
    ],
    ids=["empty", "truncated", "binary", "other-version", "deep-nesting", "not-an-object"],
)
def test_bad_report_files_get_a_clear_error(tmp_path, content, reason):
    """Truncated, binary, deeply nested and foreign-version reports raise ReportError saying why."""
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=reason):
        load_report(path)


def test_enormous_report_is_refused_before_parsing(tmp_path, monkeypatch):
    """A file over the size limit is refused by its size, without reading it."""
    import sdcscan.report.validation as report_module

    monkeypatch.setattr(report_module, "MAX_REPORT_BYTES", 100)
    path = tmp_path / "r.json"
    path.write_bytes(json.dumps(_good_report()).encode())
    with pytest.raises(ReportError, match="too large"):
        load_report(path)


def test_yaml_module_is_the_safe_loader():
    """The strict loader refuses Python object tags even when asked directly."""
    from sdcscan.profile import _StrictLoader

    with pytest.raises(yaml.YAMLError):
        yaml.load("!!python/object/apply:os.system ['true']", Loader=_StrictLoader)


# ---------------------------------------------------------------------------------------------------
# `compare` over every field of a report replaced by every kind of JSON value (issue 12, item 6).


def _compare_outcome(path: Path) -> tuple[str, object]:
    """('skipped', reason) or ('used', extract) for one file, as `compare` reads it."""
    try:
        return "used", read_report(str(path), Extractor())
    except ReportError as err:
        return "skipped", str(err)


def test_every_field_as_every_json_type_is_judged_or_skipped_by_compare(tmp_path, monkeypatch):
    """Each field of a report (140 of them) replaced by null, bool, numbers, a 5000-digit integer, NaN,
    markup, escape sequences, lists, objects, deep nesting, or removed: compare's reader either skips the
    file with a one-line reason or extracts it; summarize and the renderer then judge it (exit 0 or 1,
    1 only with a failing finding) without an exception. The unit-by-unit parser of large reports agrees
    with the whole-document one on every case."""
    base = _good_report()
    companion = Extractor().extract(COMPANION, source="companion.json")
    path = tmp_path / "r.json"
    checked = 0
    judged: dict[str, Any] = {}
    for field in field_paths(base):
        for mutation in MUTATIONS:
            path.write_text(mutated_text(base, field, mutation), encoding="utf-8", errors="surrogatepass")
            outcomes = []
            for threshold in (1 << 40, 0):  # whole document, then unit by unit
                monkeypatch.setattr(report_file, "STREAM_UNITS_ABOVE", threshold)
                outcomes.append(_compare_outcome(path))
            assert outcomes[0] == outcomes[1], (field, mutation.name, outcomes)
            _, value = outcomes[0]
            if isinstance(value, str):  # skipped, with this reason
                assert value and "\n" not in value and "(unexpected " not in value, (
                    field,
                    mutation.name,
                    value,
                )
                continue
            assert isinstance(value, HostReport)
            # Many spoiled fields extract to the same report: judge each distinct one once (summarize is
            # deterministic; one DuckDB run costs about 0.1 s). The file's hash differs every time and only
            # tells copies of one host's run apart; the companion is another host.
            key = repr(dataclasses.replace(value, sha256=""))
            summary = judged.get(key)
            if summary is None:
                summary = judged[key] = summarize([value, companion])
            render_compare(summary, Console(file=StringIO(), width=120))
            json.dumps(summary.to_dict())
            failing = any(f.kind in FAILING_KINDS for f in summary.findings)
            assert summary.exit_code == (1 if failing else 0), (field, mutation.name)
            checked += 1
    assert checked > 100  # most spoiled fields are refused, but not all: both paths are exercised
