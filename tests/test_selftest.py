"""`sdcscan selftest`: the JSON rows have the documented keys; misses, false positives and a firing
negative control exit 1; bad options exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sdcscan.calibration import measure as calibrate
from sdcscan.cli.abft import selftest
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Outcome
from sdcscan.selftest.sweep import REDRAWS, selftest_workloads
from sdcscan.workloads import SPECS
from sdcscan.workloads.base import REGISTRY, has_selftest
from tests.helpers.selftest import FakeAbft as _Fake

SITE_KEYS = {"workload", "variant", "site", "bit", "trials", "detected"}
CLEAN_KEYS = {"workload", "variant", "site", "trials", "false_positives"}


def test_gemm_fp_selftest_runs_and_reports_documented_rows(calibration_here):
    """Two trials of every gemm_fp variant: exit 0, a clean row per variant, a row per (site, bit)."""
    args = ["--workloads", "gemm_fp", "--trials", "2", "--json", "--calibration", calibration_here]
    r = CliRunner().invoke(selftest, args)
    assert r.exit_code == 0, r.stderr
    result = json.loads(r.stdout)
    rows = result["rows"]
    variants = {"float32", "float64", "bfloat16", "bfloat16_zero_mean", "float16"}
    clean = [x for x in rows if x["site"] == "clean"]
    assert {x["variant"] for x in clean} == variants and all(set(x) >= CLEAN_KEYS for x in clean)
    assert all(x["false_positives"] == 0 and x["trials"] == 2 for x in clean)
    sites = [x for x in rows if x["site"] != "clean"]
    assert all(set(x) >= SITE_KEYS for x in sites)
    labels = {x["bit"] for x in sites if not isinstance(x["bit"], int)}
    assert labels >= {"any", "swap_in_row", "swap_columns", "pair_in_row", "relerr:0.1"}
    assert {x["site"] for x in sites} == {"output", "operand_b_encoded", "operand_a"}
    assert all(x["detected"] == 0 for x in sites if x["site"] == "operand_a")
    bf16 = {x["bit"]: x for x in sites if x["variant"] == "bfloat16" and x["site"] == "output"}
    assert [bf16[b]["floor"] for b in (10, 11, 14)] == [0.99, 1.0, 1.0]
    assert "selftest: pass" in r.stderr and result["passed"]
    assert not [n for n in result["notes"] if "no calibration" in n]


def test_a_device_missing_from_the_table_calibrates_itself_and_says_so(tmp_path, monkeypatch):
    """On a device the named table does not know, gemm_fp measures e_max itself (no weaker fallback)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(calibrate, "SHIPPED_TABLE", "data/no-such-table.json")  # nor the shipped one
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schema": "sdcscan-calibration/1", "c": 2.5, "entries": []}))
    args = ["--workloads", "gemm_fp", "--trials", "1", "--json", "--calibration", str(empty)]
    r = CliRunner().invoke(selftest, args)
    result = json.loads(r.stdout)
    assert sum("calibrated on this unit" in n for n in result["notes"]) == 4  # one per dtype
    assert "note: gemm_fp: float32 (float32 checker)" in r.stderr and (tmp_path / "state").is_dir()


@pytest.mark.parametrize(
    ("attrs", "expected_exit"),
    [({}, 0), ({"detects": False}, 1), ({"sees_input": True}, 1), ({"clean_fires": True}, 1)],
)
def test_exit_code_follows_floors_false_positives_and_negative_controls(monkeypatch, attrs, expected_exit):
    fake = type("FakeAbft", (_Fake,), attrs)
    assert has_selftest(fake)
    monkeypatch.setitem(SPECS, "fake_abft", fake.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", fake)
    r = CliRunner().invoke(selftest, ["-w", "fake_abft", "--trials", "3", "--json"])
    assert r.exit_code == expected_exit, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [(x["site"], x["bit"]) for x in rows] == [
        ("clean", None),
        ("output", 30),
        ("output", "any"),
        ("input", 31),
    ]
    assert all(x["trials"] == 3 for x in rows)


def test_the_selftest_states_what_is_not_caught(monkeypatch):
    """Blind spots by design are part of the result, in JSON and in the table a person reads."""
    monkeypatch.setitem(SPECS, "fake_abft", _Fake.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", _Fake)
    r = CliRunner().invoke(selftest, ["-w", "fake_abft", "--trials", "2", "--json"])
    assert json.loads(r.stdout)["blind_spots"] == {"fake_abft": list(_Fake.blind_spots)}
    assert "Not caught, by design" in r.stderr and "fake_abft: a flip of the input" in r.stderr
    members = {k: v for k, v in vars(_Fake).items() if not k.startswith("__")}
    assert has_selftest(type("WithBlindSpots", (), members))
    del members["blind_spots"]
    assert not has_selftest(type("NoBlindSpots", (), members))  # a workload must state them to be swept


def test_every_abft_workload_states_its_blind_spots():
    for cls in selftest_workloads(None):
        assert cls.blind_spots and all(len(s) > 20 for s in cls.blind_spots), cls.name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-w", "gemm_fq"], "did you mean 'gemm_fp'"),
        (["-w", "train"], "has no self-test"),
        (["--trials", "0"], "--trials must be at least 1"),
    ],
)
def test_bad_options_exit_2_with_one_clear_line(args, message):
    r = CliRunner().invoke(selftest, args)
    assert r.exit_code == 2
    assert r.stderr.startswith("Error:") and message in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("attrs", "mark", "shown"), [({}, "ok", "100.0% (bit 30)"), ({"detects": False}, "FAIL", "0.0% (bit 30)")]
)
def test_the_table_has_a_line_per_site_with_the_fault_nearest_its_floor(monkeypatch, attrs, mark, shown):
    """What a person reads: clean, output and input lines for the fake's four rows; the output line
    shows the fault nearest its floor (a failed one first) and is marked as its rows are."""
    fake = type("FakeAbft", (_Fake,), attrs)
    monkeypatch.setitem(SPECS, "fake_abft", fake.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", fake)
    r = CliRunner().invoke(selftest, ["-w", "fake_abft", "--trials", "3"])
    cells = [[c.strip() for c in ln.split("│")[1:-1]] for ln in r.stderr.splitlines() if "fake_abft" in ln]
    table = [c for c in cells if len(c) == 9]
    assert [c[2] for c in table] == ["clean", "output", "input"], r.stderr
    assert (table[1][3], table[1][4], table[1][6], table[1][8]) == ("2", "6", shown, mark)
    assert table[2][7] == "silent" and table[2][8] == "ok"


class _ZeroOutput(_Fake):
    """Its output is all zeros: a stuck-at-0 bit there changes no value on any draw."""

    def run(self, ctx, case):
        import torch

        ctx.fault("input", torch.ones(self.p["size"]))
        y = ctx.fault("output", torch.zeros(self.p["size"]))
        return Outcome(status=STATUS_MISMATCH if bool(y.any()) else STATUS_OK, digest="0")

    @classmethod
    def selftest_bits(cls, variant, site):
        return ["stuck0"] if site == "output" else [31]

    @classmethod
    def selftest_floor(cls, variant, site, bit):
        return 1.0 if bit == "stuck0" else None


def test_a_fault_that_never_changes_a_value_is_named_not_exercised_and_the_selftest_passes(monkeypatch):
    """`sdcscan selftest -w matmul_golden --trials 2` exited 1: both draws of float64's stuck0 left
    every value equal, and zero trials read as a missed floor."""
    monkeypatch.setitem(SPECS, "fake_abft", _ZeroOutput.spec)
    monkeypatch.setitem(REGISTRY, "fake_abft", _ZeroOutput)
    r = CliRunner().invoke(selftest, ["-w", "fake_abft", "--trials", "3", "--json"])
    assert r.exit_code == 0, r.stderr
    stuck = next(x for x in json.loads(r.stdout)["rows"] if x["bit"] == "stuck0")
    draws = 3 * (1 + REDRAWS)
    assert (stuck["trials"], stuck["unchanged"], stuck["exercised"], stuck["passed"]) == (
        0,
        draws,
        False,
        True,
    )
    assert (
        f"not exercised: fake_abft/only: output stuck0: all {draws} draws left every value equal" in r.stderr
    )
    assert "selftest: pass" in r.stderr
