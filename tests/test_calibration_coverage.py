"""gemm_fp's e_max covers real weights and keeps fp32 sensitive (issue 32, item 2): clean heavy-tailed,
outlier-channel and activation-against-weight operands stay well inside their thresholds, and an fp32
relative error of 10⁻³ in one element is caught. Small versions of scripts/bench_clean_rows.py and
scripts/bench_detection.py."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from sdcscan.calibration import measure as calibration
from sdcscan.checks import vabft
from sdcscan.faults import from_label
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case
from sdcscan.workloads import load
from sdcscan.workloads.base import Context

CPU = torch.device("cpu")
SHAPE = (128, 512, 128)
HEADROOM = 0.8  # the largest |D|/T a clean row or column may use (issue 32's acceptance)


@functools.cache
def _e_max(dtype: str) -> tuple[float, float]:
    """(e_max, e_mean) of a fresh measurement at SHAPE with an fp32 checker, as a unit without a cache
    makes it (nothing is written)."""
    fp = calibration.fingerprint(CPU, dtype, "float32")
    entry = calibration.fresh_entry(CPU, fp, SHAPE)
    return float(entry["e_max"]), float(entry["e_mean"])


def _worst(dist: str, dtype: str, rows: int, seed: int, e: tuple[float, float]) -> tuple[float, float, int]:
    """(largest row |D|/T, largest column |D|/T, rows and columns that fired) over clean products."""
    g, dt = torch.Generator().manual_seed(seed), calibration.DTYPES[dtype]
    worst_r = worst_c = 0.0
    fired = 0
    for _ in range(-(-rows // SHAPE[0])):
        a, b = calibration.sample_pair(dist, SHAPE, g, dt)
        exp = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, e[0], e_mean=e[1])
        r, c = vabft.verify(a @ b, exp)
        worst_r, worst_c = max(worst_r, r.ratio()), max(worst_c, c.ratio())
        fired += int(r.bad.sum()) + int(c.bad.sum())  # tiles
    return worst_r, worst_c, fired


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(
    "dist", ["student_t3", "student_t4", "outlier_channels", "log_scales", "activations_weights"]
)
def test_clean_heavy_tailed_and_outlier_channel_rows_stay_well_inside_the_threshold(dtype, dist):
    """10⁴ clean rows (and their columns) per input use at most 0.8 of their thresholds, none fires."""
    worst_r, worst_c, fired = _worst(dist, dtype, 10_000, seed=32, e=_e_max(dtype))
    assert fired == 0 and worst_r <= HEADROOM and worst_c <= HEADROOM, (worst_r, worst_c)


def test_the_column_mean_term_is_what_keeps_activations_against_weights_silent(monkeypatch):
    """Weights whose output columns have means of either sign: B's row means cancel, so V-ABFT's S1 alone
    sees no mean part in C and clean bf16 rows come close to firing; with the column term they stay well
    inside."""
    shape = (128, 1024, 256)  # where the real layers fired
    fp = calibration.fingerprint(CPU, "bfloat16", "float32")
    entry = calibration.fresh_entry(CPU, fp, shape)
    e_max, e_mean = float(entry["e_max"]), float(entry["e_mean"])
    g = torch.Generator().manual_seed(5)
    pairs = [calibration.sample_pair("activations_weights", shape, g, torch.bfloat16) for _ in range(8)]

    def worst_row() -> float:
        return max(
            vabft.verify(
                a @ b,
                vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, e_max, e_mean=e_mean),
            )[0].ratio()
            for a, b in pairs
        )

    assert worst_row() <= HEADROOM
    summarize = vabft.summarize
    monkeypatch.setattr(
        vabft,
        "summarize",
        lambda b: dataclasses.replace(summarize(b), s1_cols=torch.zeros(1, dtype=torch.float64)),
    )
    assert worst_row() > HEADROOM  # without it: clean rows use more than they may


def test_heavy_tailed_inputs_still_fail_a_flipped_exponent():
    """The other way: on the same inputs the check fires when one output's exponent bit flips."""
    e_max, e_mean = _e_max("bfloat16")
    g = torch.Generator().manual_seed(7)
    for dist in ("student_t4", "outlier_channels", "activations_weights"):
        a, b = calibration.sample_pair(dist, SHAPE, g, torch.bfloat16)
        c_out = a @ b
        i, j = divmod(int(c_out.abs().argmax()), SHAPE[2])
        c_out.view(torch.int16)[i, j] ^= 1 << 14  # exponent MSB of the largest output
        exp = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, e_max, e_mean=e_mean)
        r, c = vabft.verify(c_out, exp)
        assert bool(r.bad[i].any()) and bool(c.bad[j].any()), dist


def test_the_column_checksum_rounds_no_more_than_the_row_checksum():
    """fp32's self-calibrated e_max was twice the table's because (1ᵀA)·B was a product with Bᵀ, which
    MKL sums one term after another (3x the rounding of the row side); the column side now needs about
    what the row side needs."""
    g = torch.Generator().manual_seed(0)
    worst_r = worst_c = 0.0
    for _ in range(2):
        a, b = calibration.sample_pair("abs_normal", (256, 1024, 256), g, torch.float32)
        c_out = a @ b
        expect = vabft.expected(a, b, vabft.encode(b, torch.float32), torch.float32, 1.0)
        rows, cols = vabft.verify(c_out, expect)  # the row and column checks gemm_fp runs
        worst_r, worst_c = max(worst_r, rows.ratio()), max(worst_c, cols.ratio())
    assert worst_c <= 1.5 * worst_r, (worst_r, worst_c)


@pytest.fixture
def fresh_state(tmp_path, monkeypatch):
    """An empty state directory and no shipped table: the unit measures its e_max."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(calibration, "SHIPPED_TABLE", "data/no-such-table.json")


def _relerr_1e_3(shape: list[int], trials: int, **params: object) -> tuple[int, int, int]:
    """(caught, changed, nominated) of relative errors of 10⁻³ in one fp32 output over `trials` cases of
    gemm_fp at `shape`, each case also run clean first, which must pass. Nominated: the statistical
    check fired; caught: the fp64 confirmation found the element beyond correct arithmetic's bound."""
    cls = load("gemm_fp")
    defaults = cls.spec.defaults
    merged = {**defaults, "dtypes": ["float32"], "shapes": [shape], "repeats": [1],
              "checkers": [defaults["checkers"][defaults["dtypes"].index("float32")]], **params}  # fmt: skip
    workload = cls(merged)
    ctx = Context(unit="cpu:0", device=CPU, run_seed=0, params=merged)
    workload.prepare(ctx)
    caught = changed = nominated = 0
    for t in range(trials):
        case = Case(index=t, workload="gemm_fp", seed=1000 + t, occurrence=0, params=merged)
        ctx.begin_case(None)
        assert workload.run(ctx, case).status == STATUS_OK
        ctx.begin_case(from_label("relerr:1e-3", "output", 7919 * t + 1))
        outcome = workload.run(ctx, case)
        if ctx.injected is not None and ctx.injected["value_changed"]:
            changed += 1
            caught += outcome.status == STATUS_MISMATCH
            nominated += bool(outcome.detail["bad_rows"] or outcome.detail["bad_columns"])
    return caught, changed, nominated


def test_fp32_relative_error_of_1e_3_is_caught_and_clean_cases_stay_silent(fresh_state):
    """The self-test's fp32 variant (256, 1024, 256) on fixed seeds: relerr 1e-3 at >= 99%, 0 false positives."""
    caught, changed, _ = _relerr_1e_3([256, 1024, 256], 100, checkers=["float32"])
    assert changed >= 95 and caught >= 0.99 * changed, (caught, changed)


def test_fp32_relative_error_of_1e_3_on_zero_mean_inputs_at_the_burnin_shape(fresh_state):
    """Issue 32's target through the workload, on N(0,1) operands (the hard case: an element small for
    its row) at (256, 4096, 256), with gemm_fp's default checker: the statistical check still nominates
    about 99% of relative errors of 10⁻³ (22% before the tiles and the second-moment threshold), and no
    clean case fires. Since issue 44 a nomination is confirmed only beyond the bound correct arithmetic
    cannot exceed, γ_k·Σ|a|·|b|, which on zero-mean data at k = 4096 lies above 10⁻³ of every element
    (scripts/bench_confirm_sensitivity.py): none is confirmed, the price of zero false positives by
    construction. The nomination rate is about 99%: 1,189 of 1,200 trials (99.1%) over case seeds
    1000-1599 and 50000-50599 on an AVX-512 EPYC. 200 trials (each clean and struck: 65 s for 400 made
    this the suite's third-longest test) against 97.5%: at most 5 misses where 1.8 are expected."""
    caught, changed, nominated = _relerr_1e_3([256, 4096, 256], 200, inputs="normal")
    assert changed == 200 and nominated >= 0.975 * changed, (nominated, changed)
    assert caught == 0
