"""`sdcscan calibrate`: writes a valid table that gemm_fp then uses; bad options exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from sdcscan.calibration import measure as calibrate
from sdcscan.cli.abft import calibrate as calibrate_cmd
from sdcscan.errors import UsageError
from sdcscan.units import device_model
from sdcscan.workloads import load
from sdcscan.workloads.base import Context

TINY = ["--rows", "64", "--k", "32,64"]


def test_calibrate_writes_a_table_that_gemm_fp_loads(tmp_path: Path):
    """Tiny rows, two dtypes: the file has one entry per (dtype, checker) and gemm_fp needs no fallback."""
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(calibrate_cmd, [*TINY, "--dtypes", "float32,float16", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.stderr
    table = json.loads(out.read_text())
    assert json.loads(r.stdout)["entries"] == table["entries"]
    keys = {(e["dtype"], e["checker"]) for e in table["entries"]}
    assert keys == {("float32", "float32"), ("float32", "float64"), ("float16", "float32")}
    for e in table["entries"]:
        assert e["device_model"] == device_model(torch.device("cpu")) and e["torch"] == torch.__version__
        assert e["e_max"] >= calibrate.DEFAULT_MARGIN * e["needed"] * 0.999 and e["rows"] >= 64
        assert e["k_max"] == 64 and e["method"] == calibrate.METHOD
    cls = load("gemm_fp")
    params = {
        **cls.spec.defaults,
        "dtypes": ["float32", "float16"],
        "shapes": [[8, 64, 8]] * 2,
        "repeats": [1, 1],
    }
    params |= {"checkers": ["float32", "float32"], "calibration": str(out)}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=0, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    assert ctx.notes == [] and all(t is not None and t.source == "file" for t in workload.thresholds)


def test_calibrate_merges_into_an_existing_file(tmp_path: Path):
    """Entries of other devices in the output file are kept; the same key is replaced."""
    out = tmp_path / "cal.json"
    other = {
        "device_model": "Other CPU",
        "torch": "0",
        "dtype": "float32",
        "checker": "float32",
        "e_max": 1e-6,
    }
    out.write_text(json.dumps({"schema": calibrate.SCHEMA, "entries": [other]}))
    for _ in range(2):
        r = CliRunner().invoke(calibrate_cmd, [*TINY, "--dtypes", "float64", "-o", str(out)])
        assert r.exit_code == 0, r.stderr
    entries = json.loads(out.read_text())["entries"]
    assert [e["device_model"] for e in entries].count("Other CPU") == 1 and len(entries) == 2


@pytest.mark.parametrize(
    "args",
    [["--dtypes", "int8"], ["--rows", "0"], ["--k", "1,x"], ["--device", "tpu"], ["--margin", "0.5"]],
)
def test_bad_options_exit_2_with_one_line(args):
    r = CliRunner().invoke(calibrate_cmd, [*TINY, *args])
    assert r.exit_code == 2
    assert r.stderr.startswith("Error:") and r.stderr.count("\n") == 1


def test_shipped_table_is_valid_and_covers_every_dtype():
    table = calibrate.load_table()
    assert {(e["dtype"], e["checker"]) for e in table["entries"]} >= {
        ("float32", "float32"),
        ("float32", "float64"),
        ("float64", "float64"),
        ("bfloat16", "float32"),
        ("float16", "float32"),
    }
    assert all(e["rows"] >= 10_000 and e["margin"] >= calibrate.DEFAULT_MARGIN for e in table["entries"])
    assert all(e["method"] == calibrate.METHOD for e in table["entries"])  # else no unit would use them


def test_unreadable_or_foreign_calibration_files_are_usage_errors(tmp_path: Path):
    with pytest.raises(UsageError, match="cannot read"):
        calibrate.load_table(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(UsageError, match="not an sdcscan calibration table"):
        calibrate.load_table(str(bad))


def test_lookup_prefers_this_torch_version():
    entries = [
        {"device_model": "X", "dtype": "float32", "checker": "float32", "torch": "0.0", "e_max": 1.0},
        {
            "device_model": "X",
            "dtype": "float32",
            "checker": "float32",
            "torch": torch.__version__,
            "e_max": 2.0,
        },
    ]
    found = calibrate.lookup({"entries": entries}, "X", "float32", "float32")
    assert found is not None and found["e_max"] == 2.0
    assert calibrate.lookup({"entries": entries}, "Y", "float32", "float32") is None


@pytest.mark.parametrize("x", [2.0226e-7, 1.0001e-6, 9.9951e-3, 4.5e-7, 1.2345e-14, 3.0])
def test_a_written_e_max_is_rounded_up_never_below_what_was_measured(x: float):
    r = calibrate.rounded_up(x)
    assert x <= r <= x * 1.01 and r == float(f"{r:.3g}")
