"""Unit classes and the plans sized for them (issue 43): a CPU's class from its ISA, flags and pins; a
profile's `class_params` applying to a class and every slower one; plans keyed by the class they use."""

from __future__ import annotations

import pytest

from sdcscan.errors import ProfileError
from sdcscan.profile import profile_from_data
from sdcscan.run.plan import Plan
from sdcscan.units import CPU_CLASSES, cpu_class

AMX_FLAGS = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"]


@pytest.mark.parametrize(
    ("capability", "flags", "pin", "expected"),
    [
        ("AVX512", AMX_FLAGS, None, "amx"),
        ("AVX512", ["avx2", "avx512f", "avx512_bf16"], None, "avx512-bf16"),  # Zen 4, Cooper Lake
        ("AVX512", ["avx2", "avx512f", "avx512_vnni"], None, "avx512"),  # Cascade Lake
        ("AVX2", AMX_FLAGS, None, "avx2"),  # ATEN_CPU_CAPABILITY=avx2 on an AMX host
        ("AVX2", ["avx2", "fma"], None, "avx2"),  # an AVX2 EPYC
        ("DEFAULT", [], None, "baseline"),
        ("SVE256", [], None, "baseline"),  # an Arm core
        ("AVX512", AMX_FLAGS, "AVX2", "avx2"),  # oneDNN held to AVX2: bf16 and int8 as slow as there
        ("AVX512", AMX_FLAGS, "avx512_core", "avx512"),
        ("AVX512", AMX_FLAGS, "AVX512_CORE_BF16", "avx512-bf16"),
        ("AVX512", ["avx512f"], "AVX512_CORE_AMX", "avx512"),  # a pin never raises a class
        ("AVX512", AMX_FLAGS, "nonsense", "amx"),
    ],
)
def test_a_cpu_class_comes_from_the_isa_torch_uses_the_flags_and_the_onednn_pin(
    capability: str, flags: list[str], pin: str | None, expected: str
) -> None:
    assert cpu_class(capability, flags, pin) == expected


def _profile(**entry: object) -> dict[str, object]:
    return {"version": 1, "workloads": [{"name": "gemm_fp", **entry}]}


def _load(**entry: object):  # type: ignore[no-untyped-def]
    return profile_from_data(_profile(**entry), label="p.yaml", default_name="p")


def test_a_class_entry_holds_for_its_class_and_every_slower_one_and_the_slowest_wins() -> None:
    profile = _load(
        params={"repeats": [4, 4, 8, 8]},
        class_params={"avx512": {"repeats": [4, 4, 2, 8]}, "avx2": {"repeats": [4, 4, 1, 1]}},
        cuda_params={"repeats": [9, 9, 9, 9]},
    )
    entry = profile.workloads[0]
    got = {cls: entry.params_for("cpu", cls)["repeats"] for cls in CPU_CLASSES}
    assert got == {
        "baseline": [4, 4, 1, 1],
        "avx2": [4, 4, 1, 1],
        "avx512": [4, 4, 2, 8],
        "avx512-bf16": [4, 4, 8, 8],
        "amx": [4, 4, 8, 8],
    }
    assert entry.params_for("cpu")["repeats"] == [4, 4, 8, 8]  # a class not known: the profile's params
    assert entry.params_for("cuda", "sm90")["repeats"] == [9, 9, 9, 9]  # GPUs: cuda_params, no CPU class


def test_plans_of_two_classes_differ_only_where_the_profile_sizes_them() -> None:
    sized = _load(class_params={"avx2": {"repeats": [4, 4, 1, 1]}})
    amx, avx2, baseline = (Plan(sized, 7, "cpu", c) for c in ("amx", "avx2", "baseline"))
    assert amx.key != avx2.key and avx2.case(2).params["repeats"] == [4, 4, 1, 1]
    assert baseline.case(2).params == avx2.case(2).params
    assert amx.key == Plan(sized, 7, "cpu").key  # a class the profile leaves alone: the plan of before
    unsized = _load()
    assert Plan(unsized, 7, "cpu", "avx2").key == Plan(unsized, 7, "cpu", "amx").key


def test_class_layers_change_the_plan_hash_and_no_layer_keeps_the_old_one() -> None:
    assert _load().sha256 == _load(class_params={}).sha256
    assert _load().sha256 != _load(class_params={"avx2": {"repeats": [4, 4, 1, 1]}}).sha256


@pytest.mark.parametrize(
    ("class_params", "message"),
    [
        (
            {"avx3": {}},
            "class_params: expected CPU classes (baseline, avx2, avx512, avx512-bf16, amx), got avx3",
        ),
        ([1], "class_params: expected a mapping of CPU classes, got a list"),
        ({"avx2": {"repeat": [1]}}, "class_params.avx2"),
        ({"avx2": {"repeats": [0, 1, 1, 1]}}, "class_params.avx2.repeats (gemm_fp)"),
        ({"avx2": {"repeats": [1, 1]}}, "class_params.avx2.repeats (gemm_fp)"),  # rules, on merged params
    ],
)
def test_a_bad_class_layer_is_refused_at_load_naming_it(class_params: object, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        _load(class_params=class_params)
    assert message in str(err.value)


def test_a_run_sizes_its_cases_for_the_class_of_the_unit_it_runs_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What ships: `sdcscan run` on a CPU that torch holds to its baseline kernels
    (`ATEN_CPU_CAPABILITY=default`, so this holds on AVX2 and AVX-512 machines alike) records the class
    in the unit's cohort and runs the baseline layer's cases (one product a case), and unpinned the
    profile's own (two)."""
    import json
    import subprocess

    from tests.helpers.cli import child_env, sdcscan_cmd

    (tmp_path / "p.yaml").write_text(
        "version: 1\nbudget: 3s\nworkloads:\n  - name: matmul_golden\n"
        "    params: {repeats: [2, 2, 2, 2]}\n    class_params:\n      baseline: {repeats: [1, 1, 1, 1]}\n"
    )
    per_case = {}
    for isa in ("default", None):
        env = child_env() | {"XDG_STATE_HOME": str(tmp_path / "state")}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if isa:
            env["ATEN_CPU_CAPABILITY"] = isa
        out = tmp_path / f"{isa}.json"
        args = ("run", "-p", "p.yaml", "--units", "cpu:0", "--budget", "6s", "-o", str(out))
        done = subprocess.run(
            sdcscan_cmd(*args), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(out.read_text())
        (unit,) = report["units"]
        cls = report["cohorts"][unit["cohort"]]["class"]
        per_case[cls] = unit["checked"]["matmul_golden"]["checked_ops"] / unit["cases_run"]
    assert "baseline" in per_case and len(per_case) == 2, per_case  # an x86 CPU is above baseline unpinned
    (other,) = set(per_case) - {"baseline"}
    assert per_case["baseline"] == 256 * 1024 * 256 and per_case[other] == 2 * 256 * 1024 * 256


def test_quick_runs_one_product_of_each_fp8_slot_on_every_class_without_amx() -> None:
    """Without AMX torch's CPU `_scaled_mm` converts to fp32 and multiplies there (a few ms a product), so
    every class below amx runs both fp8 slots once a case; with AMX it calls oneDNN's fp8 kernel (0.14
    GFLOP/s measured), and amx runs none (issue 44)."""
    from sdcscan.checks.limits import FP8_SLOTS
    from sdcscan.profile import load_profile

    golden = next(w for w in load_profile("quick").workloads if w.name == "matmul_golden")
    for cls in CPU_CLASSES:
        params = golden.params_for("cpu", cls)
        fp8_repeats = {
            d: r for d, r in zip(params["dtypes"], params["repeats"], strict=True) if d in FP8_SLOTS
        }
        assert fp8_repeats == ({} if cls == "amx" else dict.fromkeys(FP8_SLOTS, 1)), cls
