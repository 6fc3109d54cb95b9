"""Configuration mistakes are exit 2 before any work (issue 15, findings 5 and 9).

Every workload parameter has a range in the catalogue, checked when the profile is loaded; blank
`--units`/`--workloads` lists are errors, not "all"; `--calibration` is read and checked before a worker
starts; and no error quotes the text of a file that is not a profile. The command-line tests check the
cheap proxy for "before any work": exit 2 with one `Error:` line, no `journal:` line, no journal file.
"""

from __future__ import annotations

import json
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from sdcscan.calibration.table import check_table_file, e_max_bounds
from sdcscan.errors import ProfileError, UsageError
from sdcscan.profile import check_overrides, load_profile, profile_from_data
from sdcscan.workloads import SPECS
from tests.helpers.cli import one_error_line

SECRET = "s3cr3tHashValue"
SHADOW_LIKE = f"root:$6$saltsalt${SECRET}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
FP4 = ["float32", "float64", "bfloat16", "float16"]

# (workload, params, key the error names, what it says): one bad value per parameter, each of which the
# workload would refuse in its worker, compute nothing with, or misjudge as a miscomputing unit.
BAD_PARAMS = [
    ("collective", {"collectives": ["all_to_all"]}, "collectives", "one of all_reduce"),
    ("collective", {"dtypes": ["float64"]}, "dtypes", "one of bfloat16"),
    ("collective", {"sizes": [0]}, "sizes", "item [0]"),
    ("collective", {"triage_budget": 0}, "triage_budget", "integer in 1..1024"),
    ("train_dp", {"width": 0}, "width", "integer"),
    ("train_dp", {"depth": 0}, "depth", "integer"),
    ("train_dp", {"batch": 0}, "batch", "integer"),
    ("train_dp", {"steps": 0}, "steps", "integer"),
    ("train_dp", {"hash_every": 0}, "hash_every", "integer"),
    ("train_dp", {"dtype": "float16"}, "dtype", "one of"),
    ("train_dp", {"lr": 0.0}, "lr", "number"),
    ("train", {"inputs": 0}, "inputs", "integer >= 1"),
    ("train", {"hidden": 0}, "hidden", "integer >= 1"),
    ("train", {"classes": 1}, "classes", "integer >= 2"),
    ("train", {"batch": 0}, "batch", "integer >= 1"),
    ("train", {"steps": 0}, "steps", "must be an integer >= 1 (got 0)"),
    ("train", {"steps": -3}, "steps", "integer >= 1"),
    ("train", {"steps": 2.5}, "steps", "integer >= 1"),
    ("train", {"steps": True}, "steps", "integer >= 1"),
    ("train", {"steps": 10**12}, "steps", "at most 1000000000"),
    ("train", {"autocast": "int8"}, "autocast", "one of none, bfloat16, float16"),
    ("embbag_int8", {"repeats": 0}, "repeats", "integer >= 1"),
    ("train", {"lr": 0.0}, "lr", "number > 0 and <= 1"),
    ("train", {"lr": 1000.0}, "lr", "number > 0 and <= 1"),
    ("train", {"lr": float("nan")}, "lr", "number > 0"),
    ("train", {"dtype": "float16"}, "dtype", "one of float32, float64, bfloat16"),
    ("matmul_golden", {"m": 0}, "m", "integer >= 1"),
    ("matmul_golden", {"reference": "cholesky"}, "reference", "one of direct, kronecker"),
    ("matmul_golden", {"k": 0}, "k", "integer >= 1"),
    ("matmul_golden", {"n": 0}, "n", "integer >= 1"),
    ("matmul_golden", {"max_abs": 0}, "max_abs", "integer >= 1"),
    ("matmul_golden", {"k": 1 << 20}, "k", "below 2^24"),
    ("matmul_golden", {"dtypes": []}, "dtypes", "non-empty list"),
    ("matmul_golden", {"dtypes": ["float32", "int8", "float16", "float64"]}, "dtypes", "item [1]"),
    ("matmul_golden", {"repeats": []}, "repeats", "non-empty list"),
    ("matmul_golden", {"repeats": [1, 0, 1, 1]}, "repeats", "item [1] must be an integer >= 1 (got 0)"),
    ("matmul_golden", {"repeats": [1, 1]}, "repeats", "one entry per dtype"),
    ("gemm_int8", {"scheme": "crc"}, "scheme", "one of mod2_32, mod127"),
    ("gemm_int8", {"shapes": []}, "shapes", "non-empty list"),
    ("gemm_int8", {"shapes": [[4, 1, 8]]}, "shapes", "k must be an integer in 2..65793 (got 1)"),
    ("gemm_int8", {"shapes": [[4, 65794, 8]]}, "shapes", "k must be at most 65793"),
    ("gemm_int8", {"shapes": [[0, 8, 8]]}, "shapes", "m must be"),
    ("gemm_int8", {"shapes": [[4, 8]]}, "shapes", "[m, k, n]"),
    ("gemm_int8", {"shapes": [[1, 8, 64771]]}, "shapes", "mod2_32"),
    ("gemm_int8", {"scheme": "mod127", "shapes": [[1, 8, 91779]]}, "shapes", "n <= 91778"),
    ("gemm_int8", {"ops_per_case": 0}, "ops_per_case", "number > 0"),
    ("gemm_int8", {"path": "fast"}, "path", "one of auto, unsigned, signed"),
    ("gemm_int8", {"check_kernel": "triton"}, "check_kernel", "one of auto, torch, fused"),
    ("embbag_int8", {"check_kernel": 1}, "check_kernel", "one of auto, torch, fused"),
    ("gemm_fp", {"check_kernel": "cuda"}, "check_kernel", "one of auto, torch, fused"),
    ("matmul_golden", {"check_kernel": "gpu"}, "check_kernel", "one of auto, torch, fused"),
    ("embbag_int8", {"mode": "sum"}, "mode", "one of exact, realistic"),
    ("embbag_int8", {"rows": 0}, "rows", "integer >= 1"),
    ("embbag_int8", {"dim": 10}, "dim", "multiple of 4"),
    ("embbag_int8", {"dim": 0}, "dim", "integer >= 4"),
    ("embbag_int8", {"bags": 0}, "bags", "integer >= 1"),
    ("embbag_int8", {"pooling": [3]}, "pooling", "a list of 2"),
    ("embbag_int8", {"pooling": [5, 2]}, "pooling", "min <= max"),
    ("embbag_int8", {"pooling": [0, 0]}, "pooling", "max >= 1"),
    ("embbag_int8", {"pooling": [1, 21846]}, "pooling", "at most 21845"),
    ("embbag_int8", {"weighted": "yes"}, "weighted", "true or false"),
    ("embbag_int8", {"bits": [8, 6]}, "bits", "multiple of 4"),
    ("embbag_int8", {"dim": 12}, "dim", "multiple of 8 with 4-bit tables"),
    ("gemm_fp", {"dtypes": []}, "dtypes", "non-empty list"),
    ("gemm_fp", {"dtypes": ["float32"]}, "shapes", "one entry per dtype"),
    ("gemm_fp", {"shapes": [[8, 8, 8]] * 3}, "shapes", "one entry per dtype"),
    ("gemm_fp", {"shapes": [[8, 0, 8]] * 4}, "shapes", "k must be an integer >= 1"),
    ("gemm_fp", {"repeats": [1, 1, 0, 1]}, "repeats", "item [2]"),
    ("gemm_fp", {"checkers": ["float16"] * 4}, "checkers", "one of float32, float64"),
    ("gemm_fp", {"checkers": ["float32"] * 4}, "checkers", "at least as precise as its dtype float64"),
    ("gemm_fp", {"inputs": "cauchy"}, "inputs", "one of abs_normal"),
    ("gemm_fp", {"c": 0}, "c", "number >= 2.5"),
    ("gemm_fp", {"calibration": "missing.json"}, "calibration", "missing.json: no such file"),
    ("gemm_fp", {"calibration": 7}, "calibration", "path of a calibration table"),
]

# The edges of each range, which must still load.
GOOD_PARAMS = [
    ("train", {"steps": 1, "hidden": 1, "inputs": 1, "batch": 1, "classes": 2, "lr": 1, "dtype": "float64"}),
    ("matmul_golden", {"k": 2**20 - 1, "max_abs": 4, "dtypes": ["float16"], "repeats": [1]}),
    ("gemm_int8", {"shapes": [[1, 2, 1], [1, 65793, 64770]], "ops_per_case": 1e9}),
    ("gemm_int8", {"scheme": "mod127", "shapes": [[1, 8, 91778]]}),
    ("embbag_int8", {"dim": 4, "pooling": [0, 21845], "weighted": True, "mode": "realistic", "bits": [8]}),
    ("embbag_int8", {"pooling": [1, 1]}),
    ("gemm_fp", {"dtypes": ["float16"], "shapes": [[1, 1, 1]], "repeats": [1], "checkers": ["float64"]}),
    ("gemm_fp", {"c": 2.5, "inputs": "llm_like", "calibration": ""}),
]


def _doc(name: str, params: dict[str, Any], layer: str = "params") -> dict[str, Any]:
    return {"version": 1, "workloads": [{"name": name, layer: params}]}


@pytest.mark.parametrize(("name", "params", "key", "needle"), BAD_PARAMS)
def test_each_bad_parameter_value_is_refused_at_load_naming_file_workload_and_key(
    name, params, key, needle, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # relative calibration paths resolve here, as in a run
    with pytest.raises(ProfileError) as err:
        profile_from_data(_doc(name, params), label="p.yaml", default_name="p")
    message = str(err.value)
    assert message.startswith(f"p.yaml: workloads[0].params.{key} ({name}): "), message
    assert needle in message


@pytest.mark.parametrize(("name", "params", "key", "needle"), BAD_PARAMS[:12])
def test_cuda_params_get_the_same_ranges(name, params, key, needle):
    with pytest.raises(ProfileError, match=rf"workloads\[0\]\.cuda_params\.{key} \({name}\)"):
        profile_from_data(_doc(name, params, "cuda_params"), label="p.yaml", default_name="p")


def test_cross_parameter_rules_see_cuda_params_over_params():
    """A rule is checked on what a GPU unit gets: params, then cuda_params over them."""
    doc = _doc("matmul_golden", {"dtypes": ["float32"], "repeats": [3]})
    profile_from_data(doc, label="p.yaml", default_name="p")
    doc["workloads"][0]["cuda_params"] = {"dtypes": ["float32", "float64"]}
    with pytest.raises(
        ProfileError, match=r"workloads\[0\]\.cuda_params\.repeats \(matmul_golden\): needs one"
    ):
        profile_from_data(doc, label="p.yaml", default_name="p")


@pytest.mark.parametrize(("name", "params"), GOOD_PARAMS)
def test_values_at_the_edges_of_each_range_load(name, params):
    profile = profile_from_data(_doc(name, params), label="p.yaml", default_name="p")
    assert dict(profile.workloads[0].params) == params


def test_every_parameter_of_every_workload_has_a_bad_value_in_the_table():
    """The table above covers the whole catalogue: a new parameter needs its bad value here."""
    covered = {(name, key) for name, _, key, _ in BAD_PARAMS}
    assert {(name, key) for name, spec in SPECS.items() for key in spec.params} <= covered


def _calibration(tmp_path: Path, table: Any) -> str:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(table))
    return str(path)


def _entry(**changes: Any) -> dict[str, Any]:
    return {
        "device_model": "X",
        "dtype": "float32",
        "checker": "float32",
        "e_max": 1e-6,
        "k_max": 4096,
    } | changes


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"schema": "other/1", "entries": []}, "not an sdcscan calibration table"),
        ({"schema": "sdcscan-calibration/1"}, "not an sdcscan calibration table"),
        ({"schema": "sdcscan-calibration/1", "entries": ["x"]}, "entries[0]: must be a mapping"),
        ({"schema": "sdcscan-calibration/1", "entries": [_entry(e_max=0)]}, "entries[0].e_max"),
        ({"schema": "sdcscan-calibration/1", "entries": [_entry(e_max="1")]}, "entries[0].e_max"),
        ({"schema": "sdcscan-calibration/1", "entries": [_entry(), _entry(k_max=0)]}, "entries[1].k_max"),
        ({"schema": "sdcscan-calibration/1", "entries": [_entry(dtype=None)]}, "entries[0].dtype"),
    ],
)
def test_calibration_tables_a_worker_could_not_use_are_refused(tmp_path, table, needle):
    path = _calibration(tmp_path, table)
    with pytest.raises(UsageError) as err:
        check_table_file(path)
    assert f"calibration table {path}: " in str(err.value) and needle in str(err.value)


SHIPPED_TABLE = json.loads(resources.files("sdcscan").joinpath("data/calibration.json").read_text())


@pytest.mark.parametrize("scale", [1e-3, 1e-6])
def test_a_table_scaled_far_below_what_rounding_needs_is_refused_before_work(tmp_path, scale):
    """Issue 33: every e_max of the shipped table times 10^-3 accused healthy CPUs (exit 1). The bf16 and
    fp16 entries then lie below a hundredth of their output's rounding: refused, exit 2, before work."""
    entries = [{**e, "e_max": e["e_max"] * scale} for e in SHIPPED_TABLE["entries"]]
    path = _calibration(tmp_path, {**SHIPPED_TABLE, "entries": entries})
    with pytest.raises(UsageError, match=r"\.e_max: outside what the arithmetic allows"):
        check_table_file(path)


@pytest.mark.parametrize("e_max", [1.0, 1e308, 0.5])
def test_an_e_max_no_rounding_can_need_is_refused_before_work(tmp_path, e_max):
    """e_max 1e308 or 1.0 ran the whole budget and wrote 392,000 raised cases: now exit 2 at once."""
    path = _calibration(tmp_path, {"schema": "sdcscan-calibration/1", "entries": [_entry(e_max=e_max)]})
    with pytest.raises(UsageError, match=r"entries\[0\]\.e_max: outside what the arithmetic allows"):
        check_table_file(path)


def test_plausible_e_max_bounds_hold_every_measured_entry_with_margin():
    """The shipped entries (clean measurements) lie at least 10x above the floor and 3x below the
    ceiling. The ceiling is a tile of 8's (`limits.e_max_ceiling`): bf16's rounding fills a quarter of
    it, since the threshold's second-moment term no longer overstates the rounding (docs/abft.md §3.1b)."""
    for e in SHIPPED_TABLE["entries"]:
        bounds = e_max_bounds(e["dtype"], e["checker"], e["k_max"])
        assert bounds is not None
        assert 10 * bounds[0] <= e["e_max"] <= bounds[1] / 3, e
        assert e["e_mean"] <= bounds[1] / 3, e
    assert e_max_bounds("float8", "float32", 4096) is None  # never used by gemm_fp: not judged here


def test_calibration_files_that_are_not_tables_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it for reading the ordinary way would wait for a writer forever
    (tmp_path / "text.json").write_text(SHADOW_LIKE)
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe" + SECRET.encode())
    cases = {
        "": "the path is empty",
        str(tmp_path / "missing.json"): "no such file",
        str(tmp_path): "is a directory, not a regular file",
        str(fifo): "is a FIFO (named pipe), not a regular file",
        "/dev/zero": "is a character device, not a regular file",
        str(tmp_path / "text.json"): "not JSON (line 1, column 1)",
        str(tmp_path / "bytes.json"): "not UTF-8",
    }
    for path, needle in cases.items():
        with pytest.raises(UsageError) as err:
            check_table_file(path)
        assert needle in str(err.value) and SECRET not in str(err.value), path


def test_good_calibration_tables_pass_the_check(tmp_path):
    """The shipped table and an empty one (every device falls back to the rigorous bound)."""
    shipped = resources.files("sdcscan").joinpath("data/calibration.json")
    assert check_table_file(str(shipped))["entries"]
    empty = _calibration(tmp_path, {"schema": "sdcscan-calibration/1", "c": 2.5, "entries": []})
    assert check_table_file(empty)["entries"] == []
    assert check_table_file(
        _calibration(tmp_path, {"schema": "sdcscan-calibration/1", "entries": [_entry()]})
    )


def test_check_overrides_checks_the_file_and_the_merged_parameters(tmp_path):
    profile = load_profile("burnin")  # has gemm_fp
    check_overrides(profile, {}, source="--calibration")
    good = _calibration(tmp_path, {"schema": "sdcscan-calibration/1", "entries": []})
    check_overrides(profile, {"gemm_fp": {"calibration": good}}, source="--calibration")
    with pytest.raises(UsageError, match=r"^--calibration: calibration table .*missing.json: no such file$"):
        check_overrides(
            profile, {"gemm_fp": {"calibration": str(tmp_path / "missing.json")}}, source="--calibration"
        )
    with pytest.raises(UsageError, match=r"gemm_fp\.shapes: needs one entry per dtype"):
        check_overrides(profile, {"gemm_fp": {"dtypes": ["float32"]}}, source="--x")
    with pytest.raises(UsageError, match="has no parameter 'nope'"):
        check_overrides(profile, {"gemm_fp": {"nope": 1}}, source="--x")


# --- the command line: `_options` is what `sdcscan run` resolves before any worker starts -------------


def _options(*args: str) -> Any:
    from sdcscan.cli.run import _options, run_cmd
    from sdcscan.cli.run_args import RunArgs

    ctx = run_cmd.make_context("run", list(args))
    return _options(RunArgs(**ctx.params), time.time())


@pytest.mark.parametrize("blank", ["", ",", " , ", " "])
def test_blank_units_and_workloads_name_nothing_rather_than_all(blank):
    with pytest.raises(UsageError, match=r"--units .* names no unit"):
        _options("--units", blank)
    with pytest.raises(UsageError, match="--workloads names no workload"):
        _options("--workloads", blank)


def test_unit_and_workload_lists_are_still_accepted_and_unknown_names_still_suggested():
    opts = _options("--units", " cpu:0 ,", "--workloads", " train , ")
    assert opts.units == " cpu:0 ," and [w.name for w in opts.profile.workloads] == ["train"]
    with pytest.raises(UsageError, match="did you mean 'train'"):
        _options("--workloads", "trian")


def test_calibration_option_is_checked_in_options(tmp_path):
    good = _calibration(tmp_path, {"schema": "sdcscan-calibration/1", "entries": []})
    assert _options("--calibration", good).param_overrides == {"gemm_fp": {"calibration": good}}
    assert _options().param_overrides == {}
    with pytest.raises(UsageError, match="--calibration '' names no file"):
        _options("--calibration", "")
    with pytest.raises(UsageError, match="no such file"):
        _options("--calibration", str(tmp_path / "missing.json"))


def test_units_in_a_profile_must_name_units():
    doc = {"version": 1, "units": " , ", "workloads": [{"name": "train"}]}
    with pytest.raises(ProfileError, match=r"p\.yaml: units ' , ' names no unit"):
        profile_from_data(doc, label="p.yaml", default_name="p")
    doc["units"] = "root:$6$" + SECRET
    with pytest.raises(ProfileError, match="expected all, cpu, cuda, cpu:N or cuda:N"):
        profile_from_data(doc, label="p.yaml", default_name="p")
    doc["units"] = "cpu:0,cuda"
    assert profile_from_data(doc, label="p.yaml", default_name="p").units == "cpu:0,cuda"


# Each command below costs a few seconds while `sdcscan run` starts its workers' fork server (and its torch
# import) before it checks the options; the full tables are checked in-process above, a sample here.


def _refused_before_work(result: Any, tmp_path: Path) -> str:
    """Exit 2 with one `Error:` line, and no sign the run began: no `journal:` line, no journal file."""
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert "journal:" not in result.stderr
    assert not list(tmp_path.rglob("*.journal.jsonl")) and not list(tmp_path.rglob("journal"))
    return line


@pytest.mark.parametrize(
    ("profile", "needle"),
    [
        (
            "version: 1\nworkloads: [{name: train, params: {steps: 0}}]\n",
            "steps (train): must be an integer >= 1",
        ),
        (
            "version: 1\nworkloads: [{name: matmul_golden, params: {repeats: []}}]\n",
            "repeats (matmul_golden)",
        ),
    ],
)
def test_run_refuses_a_bad_parameter_before_any_work(run_cli, tmp_path, profile, needle):
    (tmp_path / "bad.yaml").write_text(profile)
    result = run_cli("run", "-p", "bad.yaml", "-o", "out.json", "--budget", "30s")
    assert needle in _refused_before_work(result, tmp_path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workloads", ","], "--workloads names no workload"),
        (["--units", ""], "--units '' names no unit"),
        (["--calibration", "missing.json"], "--calibration: calibration table missing.json: no such file"),
    ],
)
def test_run_refuses_blank_lists_and_a_missing_calibration_before_any_work(run_cli, tmp_path, args, needle):
    result = run_cli("run", *args, "-o", "out.json", "--budget", "30s")
    assert needle in _refused_before_work(result, tmp_path)


@pytest.mark.parametrize("option", ["-p", "--calibration"])
def test_run_never_echoes_a_file_that_is_not_a_profile_or_table(run_cli, tmp_path, option):
    """`-p /etc/shadow` parses as YAML whose keys are whole lines; neither error may print one."""
    (tmp_path / "shadow").write_text(SHADOW_LIKE)
    result = run_cli("run", option, "shadow", "-o", "out.json")
    line = _refused_before_work(result, tmp_path)
    assert "shadow" in line and SECRET not in result.stderr + result.stdout and "$6$" not in result.stderr
