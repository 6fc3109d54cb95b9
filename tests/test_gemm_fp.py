"""gemm_fp: silent on many clean rows, fires on high-bit flips at the output and the encoded operand,
names the flipped element, and stays silent on the negative control."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from sdcscan.calibration import measure as calibrate
from sdcscan.checks import vabft
from sdcscan.checks.digest import RepeatDigest
from sdcscan.errors import InputRefused
from sdcscan.faults import FaultSpec, from_label
from sdcscan.outcomes import STATUS_ERROR, STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.units import device_model
from sdcscan.workloads import SPECS, base, load
from sdcscan.workloads.base import Context
from sdcscan.workloads.gemm_fp import workload as gemm_fp

SHAPES = {
    "float32": [256, 256, 64],
    "float64": [256, 256, 64],
    "bfloat16": [256, 128, 32],
    "float16": [256, 128, 32],
}
CHECKER = {"float32": "float32", "float64": "float64", "bfloat16": "float32", "float16": "float32"}
SIGN = {"float32": 31, "float64": 63, "bfloat16": 15, "float16": 15}
EXP_HIGH = {"float32": 29, "float64": 61, "bfloat16": 13, "float16": 13}  # the exponent bit below the MSB
EXP_MSB = {"float32": 30, "float64": 62, "bfloat16": 14, "float16": 14}


@pytest.fixture
def table_path(calibration_here: str) -> str:
    """The calibration keyed to this CPU (see conftest)."""
    return calibration_here


def make(dtype: str, table: str, *, selftest: bool = False, workload_cls=None, run_seed=7, **overrides):
    cls = workload_cls or load("gemm_fp")
    params = {
        **cls.spec.defaults,
        "dtypes": [dtype],
        "shapes": [SHAPES[dtype]],
        "repeats": [1],
        "checkers": [CHECKER[dtype]],
        "calibration": table,
        **overrides,
    }
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=run_seed, params=params)
    workload = cls.for_selftest(params) if selftest else cls(params)
    workload.prepare(ctx)
    return workload, ctx


def run(workload, ctx, seed: int, fault: FaultSpec | None = None):
    ctx.begin_case(fault)
    return workload.run(ctx, Case(index=seed, workload="gemm_fp", seed=seed, occurrence=0))


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_clean_cases_stay_silent_over_ten_thousand_rows(dtype, table_path):
    """≥ 10,240 clean rows per dtype across three input distributions, from 7 operand pools (run seeds)
    of two cases each: no row fires."""
    rows = 0
    for dist in ("abs_normal", "normal", "llm_like"):
        for pool_seed in range(7):
            workload, ctx = make(dtype, table_path, inputs=dist, run_seed=pool_seed)
            assert not ctx.notes
            for seed in range(2):
                outcome = run(workload, ctx, seed)
                assert outcome.status == STATUS_OK, (dist, outcome.mismatches)
                assert outcome.detail["max_ratio"] < 1.0
                rows += outcome.detail["rows_checked"]
    assert rows >= 10_000


@pytest.mark.parametrize("dtype", list(SHAPES))
@pytest.mark.parametrize("bit_of", [SIGN, EXP_HIGH])
def test_output_flip_is_detected_and_located(dtype, bit_of, table_path):
    """A sign or high exponent flip in C fails its row and column, and the Mismatch names that element,
    confirmed against fp64 (issue 44)."""
    workload, ctx = make(dtype, table_path)
    n = SHAPES[dtype][2]
    for seed in range(5):
        outcome = run(workload, ctx, seed, FaultSpec("bitflip", "output", seed, bit=bit_of[dtype]))
        assert ctx.injected["value_changed"]
        assert outcome.status == STATUS_MISMATCH
        i, j = divmod(ctx.injected["element"], n)
        assert outcome.mismatches[0].where.startswith(f"{dtype} C[{i}, {j}] (repeat 0): off by ")
        assert outcome.detail["confirmed"] == 1


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_flip_in_the_encoded_operand_is_detected(dtype, table_path):
    """B changed after its checksum was taken: the whole column of C it feeds is wrong, so many rows fail.

    fp32/fp64 see a sign flip of one B element. For bf16/fp16 an O(1) change of one B element is below the
    threshold (T grows with N·K·u), so the test plants a NaN; the self-test reports per-bit rates."""
    workload, ctx = make(dtype, table_path)
    low = dtype in ("bfloat16", "float16")
    for seed in range(4):
        spec = FaultSpec(
            "nan" if low else "bitflip", "operand_b_encoded", seed, bit=None if low else SIGN[dtype]
        )
        outcome = run(workload, ctx, seed, spec)
        assert outcome.status == STATUS_MISMATCH
        assert outcome.detail["bad_rows"] > 1


@pytest.mark.parametrize("dtype", list(SHAPES))
def test_negative_control_on_the_unencoded_operand_stays_silent(dtype, table_path):
    """A flip in A before the GEMM is consistent (C and the checksum both use it): the row check is blind."""
    workload, ctx = make(dtype, table_path)
    for seed in range(4):
        for bit in (0, EXP_HIGH[dtype], SIGN[dtype]):
            outcome = run(workload, ctx, seed, FaultSpec("bitflip", "operand_a", seed, bit=bit))
            assert ctx.injected is not None and outcome.status == STATUS_OK


def test_a_table_without_this_device_means_a_fresh_calibration_not_a_weaker_check(tmp_path, monkeypatch):
    """No entry for this CPU in the named file, and none shipped: the unit calibrates itself, says so,
    stays silent on clean cases and still catches exponent flips with the V-ABFT threshold. Its own
    state directory: a test before it in the same process may have cached this calibration in the
    session's. No shipped table: one measured on this CPU class with a unit's one thread matches a test
    process that runs one thread too."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(calibrate, "SHIPPED_TABLE", "data/no-such-table.json")
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"schema": calibrate.SCHEMA, "entries": []}))
    workload, ctx = make("float32", str(path))
    assert any("calibrated on this unit" in n for n in ctx.notes)
    assert run(workload, ctx, 1).status == STATUS_OK
    outcome = run(workload, ctx, 1, FaultSpec("bitflip", "output", 3, bit=29))
    assert outcome.status == STATUS_MISMATCH and outcome.detail["threshold_source"] in ("fresh", "cache")
    assert outcome.mismatches[0].check == "vabft_float32"


def test_k_beyond_the_calibrated_range_scales_e_max(table_path):
    workload, _ = make("float32", table_path, shapes=[[8, 8192, 8]])
    entry = calibrate.lookup(
        calibrate.load_table(table_path), device_model(torch.device("cpu")), "float32", "float32"
    )
    found = workload.thresholds[0]
    assert found.source == "file"
    assert found.e_max == pytest.approx(entry["e_max"] * (8192 / entry["k_max"]) ** 0.5)


def test_digest_and_ops_are_deterministic(table_path):
    workload, ctx = make("float32", table_path, repeats=[2])
    first, again = run(workload, ctx, 3), run(workload, ctx, 3)
    assert first.digest == again.digest and first.digest
    m, k, n = SHAPES["float32"]
    assert first.ops == 2.0 * m * n * k * 2


def test_dtypes_cycle_by_occurrence(table_path):
    cls = load("gemm_fp")
    params = {**cls.spec.defaults, **cls.spec.tiny, "calibration": table_path}
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    seen = []
    for occ in range(4):
        ctx.begin_case(None)
        seen.append(
            workload.run(ctx, Case(index=occ, workload="gemm_fp", seed=occ, occurrence=occ)).detail["dtype"]
        )
    assert seen == params["dtypes"]


def test_bad_parameters_are_rejected():
    cls = load("gemm_fp")
    with pytest.raises(ValueError, match="dtypes"):
        cls({"dtypes": ["int8"]})
    with pytest.raises(ValueError, match="one entry per dtype"):
        cls({"repeats": [1]})
    with pytest.raises(ValueError, match="inputs"):
        cls({"inputs": "cauchy"})


def test_reuse_product_is_a_selftest_switch_not_a_parameter():
    """Profiles cannot turn on product reuse: only `for_selftest` does, and a run recomputes every product."""
    cls = load("gemm_fp")
    assert "reuse_product" not in SPECS["gemm_fp"].defaults
    assert not cls(SPECS["gemm_fp"].tiny).reuse_product
    assert cls.for_selftest(SPECS["gemm_fp"].tiny).reuse_product


def test_reuse_product_recomputes_when_an_operand_changed(table_path):
    """Self-test mode must not hide an operand fault behind the remembered product."""
    workload, ctx = make("float32", table_path, selftest=True)
    assert run(workload, ctx, 2).status == STATUS_OK
    hit = run(workload, ctx, 2, FaultSpec("bitflip", "operand_b_encoded", 5, bit=31))
    assert hit.status == STATUS_MISMATCH
    assert run(workload, ctx, 2).status == STATUS_OK


class SynchronisingGemmFp(gemm_fp.GemmFp):
    """gemm_fp's repeat loop as it was before it kept its totals on the device: it read every repeat's
    verdict on the host, and located every failing repeat. The reference the device-side loop must match."""

    def run(self, ctx: Context, case: Case) -> Outcome:
        p, slot = self.p, 0
        repeats, found = p["repeats"][slot], self.thresholds[slot]
        assert found is not None and found.e_max is not None
        pool = self.pools[slot]
        assert pool is not None
        a, b, perms = pool.case_operands(case.seed)
        clean_b = pool.case_operands(case.seed)[1]
        expect = vabft.permuted_expected(pool.stats, a, b, perms)
        ctx.fault("operand_b_encoded", b)
        found_at: list[Mismatch] = []
        bad_rows, bad_cols, ratio, digest, confirmed = 0, 0, 0.0, RepeatDigest(), 0
        for r in range(repeats):
            with ctx.phase("compute"):
                out = a @ b
            ctx.fault("output", out, repeat=r, repeats=repeats)
            with ctx.phase("check"):
                rows, cols = vabft.verify(out, expect)
                ratio = max(ratio, rows.ratio(), cols.ratio())
                if bool(rows.bad.any()) or bool(cols.bad.any()):
                    bad_rows += int(rows.failing_lines().sum())
                    bad_cols += int(cols.failing_lines().sum())
                    records, count = self._confirm(slot, (a, clean_b, out), r)
                    found_at += records[: gemm_fp.MAX_RECORDED - len(found_at)]
                    confirmed += count
                digest.add(out)
        status = STATUS_MISMATCH if confirmed else STATUS_OK
        detail = {"bad_rows": bad_rows, "bad_columns": bad_cols, "max_ratio": ratio}
        return Outcome(status=status, digest=digest.hexdigest(), mismatches=found_at, detail=detail)


REPEATS = 4


def flip_outputs(ctx: Context, elements: dict[int, int]) -> dict[int, float]:
    """Negate element `elements[r]` of the output of repeat r, for each r given (ctx.fault strikes one
    repeat per case; this strikes several). Returns the corrupted values, filled in as the case runs."""
    plain, corrupted = ctx.fault, {}

    def fault(site, tensor, *, repeat=0, repeats=1, columns=None):
        if site == "output" and repeat in elements:
            flat = tensor.view(-1)
            flat[elements[repeat]] = -flat[elements[repeat]]
            corrupted[repeat] = float(flat[elements[repeat]])
        return plain(site, tensor, repeat=repeat, repeats=repeats, columns=columns)

    ctx.fault = fault  # type: ignore[method-assign]
    return corrupted


def first_repeat_records(mismatches):
    """The records of the first repeat named in `mismatches`: what a loop that locates only its first
    failing repeat records."""
    if not mismatches:
        return []
    first = re.search(r"\(repeat \d+\)", mismatches[0].where)
    assert first is not None
    return [m for m in mismatches if first.group(0) in m.where]


FAULTS = {
    "clean": (None, {}),
    "output flip in repeat 0": (FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=0), {}),
    "output flip in repeat 2": (FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=2), {}),
    "output flip in the last repeat": (
        FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=REPEATS - 1),
        {},
    ),
    "output flips in repeats 1 and 3": (None, {1: 5, 3: 77}),
    "encoded operand flip: every repeat fails": (FaultSpec("bitflip", "operand_b_encoded", 3, bit=-1), {}),
}


@pytest.mark.parametrize("every_block", [True, False], ids=["gpu_way", "cpu_way"])
@pytest.mark.parametrize("block", [1, 3, REPEATS])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_totals_kept_on_the_device_match_the_loop_that_read_every_repeat(
    dtype, fault, block, every_block, table_path, monkeypatch
):
    """Status, digest, failing rows and columns, max ratio: as when every repeat was read and checked
    alone on the host, whatever the block of repeats checked together (1, 3 + 1, all 4); the records
    are the first failing repeat's (the old loop's, when one repeat failed)."""
    m, _, n = SHAPES[dtype]
    output_bytes = m * n * torch.empty((), dtype=gemm_fp.DTYPES[dtype]).element_size()
    monkeypatch.setitem(base.CHECK_BLOCK_BYTES, "cpu", block * output_bytes)
    monkeypatch.setattr(
        gemm_fp, "RepeatTally", functools.partial(gemm_fp.RepeatTally, every_block=every_block)
    )
    spec, flips = FAULTS[fault]
    outcomes = []
    for cls in (gemm_fp.GemmFp, SynchronisingGemmFp):
        workload, ctx = make(dtype, table_path, repeats=[REPEATS], workload_cls=cls)
        flip_outputs(ctx, flips)
        outcomes.append(run(workload, ctx, 3, spec))
    new, old = outcomes
    assert (new.status, new.digest) == (old.status, old.digest)
    for key in ("bad_rows", "bad_columns", "max_ratio"):
        assert new.detail[key] == old.detail[key], key
    assert new.mismatches == first_repeat_records(old.mismatches)
    if spec is not None and spec.site == "output":
        assert new.mismatches == old.mismatches
        assert f"(repeat {spec.repeat})" in new.mismatches[0].where
    if fault != "clean":
        assert new.status == STATUS_MISMATCH


def test_every_failing_repeat_is_counted_and_the_first_is_located_in_its_own_output(table_path):
    """Flips in repeats 1 and 3: both count; the record names repeat 1's element with its corrupted value."""
    workload, ctx = make("float32", table_path, repeats=[REPEATS])
    corrupted = flip_outputs(ctx, {1: 5, 3: 77})  # C[0, 5] in repeat 1, C[1, 13] in repeat 3
    outcome = run(workload, ctx, 3)
    assert outcome.detail["bad_rows"] == outcome.detail["bad_columns"] == 2
    assert [m.where.split(":")[0] for m in outcome.mismatches] == ["float32 C[0, 5] (repeat 1)"]
    assert outcome.mismatches[0].actual == repr(corrupted[1])


class WaitInsideCase(Exception):
    """A tensor was read on the host inside a repeat: on a GPU that waits for the device."""


HOST_READS = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero", "numpy")


@pytest.fixture
def host_reads(monkeypatch):
    """While a compute or check phase runs, reading a tensor on the host raises WaitInsideCase; calls of
    `gemm_fp.read_totals` (the end-of-case read) are counted. Returns `watch(ctx)`, which arms a Context,
    and the counter."""
    inside, reads = [False], [0]

    def guard(name: str):
        original = getattr(torch.Tensor, name)

        def guarded(self, *args, **kwargs):
            if inside[0]:
                raise WaitInsideCase(f"Tensor.{name} inside a repeat")
            return original(self, *args, **kwargs)

        return guarded

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, guard(name))
    read_totals = gemm_fp.read_totals

    def counted(totals):
        reads[0] += 1
        return read_totals(totals)

    monkeypatch.setattr(gemm_fp, "read_totals", counted)
    # a GPU's way on the CPU: blocks folded in without reading their verdict
    monkeypatch.setattr(gemm_fp, "RepeatTally", functools.partial(gemm_fp.RepeatTally, every_block=True))

    def watch(ctx: Context) -> None:
        phase = ctx.phase

        @contextmanager
        def watched(name: str) -> Iterator[None]:
            with phase(name):
                inside[0] = name in ("compute", "check")
                try:
                    yield
                finally:
                    inside[0] = False

        monkeypatch.setattr(ctx, "phase", watched)

    return watch, reads


def test_a_case_reads_the_host_once_at_its_end_and_never_inside_a_repeat(host_reads, table_path):
    """Clean, one failing repeat, every repeat failing: no host read in the repeats, one read per case."""
    watch, reads = host_reads
    workload, ctx = make("float32", table_path, repeats=[REPEATS])
    watch(ctx)
    statuses = [
        run(workload, ctx, 3, spec).status
        for spec in (
            None,
            FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=2),
            FaultSpec("bitflip", "operand_b_encoded", 3, bit=-1),
        )
    ]
    assert statuses == [STATUS_OK, STATUS_MISMATCH, STATUS_MISMATCH]
    assert reads[0] == 3


@pytest.mark.parametrize("spec", [None, FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=2)])
def test_the_host_read_guard_catches_a_loop_that_reads_every_repeat(host_reads, table_path, spec):
    """The guard of the test above fires on the old loop, clean or failing, and only inside a phase."""
    watch, _ = host_reads
    workload, ctx = make("float32", table_path, repeats=[REPEATS], workload_cls=SynchronisingGemmFp)
    watch(ctx)
    with pytest.raises(WaitInsideCase):
        run(workload, ctx, 3, spec)
    assert float(torch.ones(())) == 1.0  # outside a phase, reads are allowed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# torch warns that the sync check is a prototype each time it is switched on (seen with 2.11.0+cu130)
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype feature:UserWarning")
def test_on_cuda_nothing_inside_the_repeats_synchronises(monkeypatch):
    """CUDA's own sync check ("error" mode) around every compute and check phase, clean and failing."""
    cls = load("gemm_fp")
    params = {
        **cls.spec.defaults,
        "dtypes": ["float32"],
        "shapes": [[256, 256, 64]],
        "repeats": [REPEATS],
        "checkers": ["float32"],
    }
    ctx = Context(unit="cuda:0", device=torch.device("cuda"), run_seed=7, params=params)
    workload = cls(params)
    workload.prepare(ctx)
    assert run(workload, ctx, 3).status == STATUS_OK  # warm-up: cuBLAS handles, the fingerprint's keys
    phase = ctx.phase

    @contextmanager
    def strict(name: str) -> Iterator[None]:
        if name not in ("compute", "check"):  # setup copies the case's host-drawn permutations: a sync
            with phase(name):
                yield
            return
        with phase(name):
            try:  # switched back whatever happens, or every later CUDA test fails on its first copy
                torch.cuda.set_sync_debug_mode("error")
                yield
            finally:
                torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(ctx, "phase", strict)
    assert run(workload, ctx, 3).status == STATUS_OK
    hit = run(workload, ctx, 3, FaultSpec("bitflip", "output", 3, element=100, bit=-1, repeat=2))
    assert hit.status == STATUS_MISMATCH and hit.mismatches[0].where.endswith("(repeat 2)")


def test_units_of_one_run_multiply_the_same_permuted_pool_and_cases_differ(table_path):
    """Consensus needs every unit of a run to compute the same case: the pool comes from the run seed
    and the permutations from the case seed. Another case, or another run's pool, is other data."""
    digests = {}
    for run_seed in (7, 7, 8):
        workload, ctx = make("float32", table_path, run_seed=run_seed, repeats=[2])
        digests.setdefault(run_seed, []).append([run(workload, ctx, seed).digest for seed in (1, 2)])
    (same_a, same_b), (other,) = digests[7], digests[8]
    assert same_a == same_b
    assert same_a[0] != same_a[1] and set(other).isdisjoint(same_a)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hardware_fault_models_at_an_exponent_bit_are_caught(dtype, table_path):
    """The self-test's floored fault models (a warp run, a stride, tiles at the lowest exponent bit; the
    exponent's top bit stuck at 0 and the sign stuck at 1) each fail the case; at random bits they are
    reported only, and a clean case passes."""
    cls = load("gemm_fp")
    labels = [b for b in cls.selftest_bits(dtype, "output") if isinstance(b, str)]
    layout = ("run32", "stride32", "tile8", "tile16", "stuck0", "stuck1")
    floored = [b for b in labels if b.split(":")[0] in layout and cls.selftest_floor(dtype, "output", b)]
    assert len(floored) == 6 and {cls.selftest_floor(dtype, "output", b) for b in floored} == {0.99}
    assert cls.selftest_floor(dtype, "output", "tile8") is None
    assert cls.selftest_floor(dtype, "output", "burst:4") is None
    workload, ctx = make(dtype, table_path, selftest=True)
    assert run(workload, ctx, 1).status == STATUS_OK
    for label in floored:
        for seed in range(3):
            outcome = run(workload, ctx, seed, from_label(label, "output", seed))
            assert ctx.injected is not None and ctx.injected["value_changed"], label
            assert outcome.status == STATUS_MISMATCH, (label, seed)


def test_inputs_out_of_a_dtypes_range_are_refused_before_work_and_allowed_without_that_dtype():
    """fp16 is not calibrated over `log_scales` (its outputs would round as subnormals): a profile asking
    for both is refused, naming the parameter; without float16 it is accepted."""
    from sdcscan.errors import ProfileError
    from sdcscan.profile import profile_from_data

    def profile(params: dict[str, object]) -> object:
        data = {"version": 1, "workloads": [{"name": "gemm_fp", "params": params}]}
        return profile_from_data(data, label="p.yaml", default_name="p")

    with pytest.raises(ProfileError, match=r"params\.inputs.*log_scales.*float16"):
        profile({"inputs": "log_scales"})
    kept = {"dtypes": ["float32", "bfloat16"], "shapes": [[64, 64, 64]] * 2, "repeats": [1, 1]}
    profile({**kept, "checkers": ["float32", "float32"], "inputs": "log_scales"})


def test_a_pool_whose_product_overflows_fp16_makes_every_case_an_error_not_a_mismatch(table_path):
    """|N|+0.5 operands at K = 65,536 sum to about 110,000 per output, past fp16's 65,504: every output
    overflows on any unit. That was `fail` (exit 1) on a correct CPU; it is refused, so the unit is
    `invalid` (exit 3) with the reason, and a shape in range is untouched."""
    workload, ctx = make("float16", table_path, shapes=[[16, 65536, 16]])
    found = workload.thresholds[0]
    assert found is not None and found.e_max is None
    assert "exceeds float16's largest value" in found.refused
    assert any("use a smaller K or leave float16 out" in note for note in ctx.notes)
    outcome = run(workload, ctx, seed=3)
    assert outcome.status == STATUS_ERROR and "exceeds float16's largest value" in (outcome.error or "")

    workload, ctx = make("float16", table_path, shapes=[[16, 4096, 16]])
    assert workload.thresholds[0] is not None and workload.thresholds[0].e_max is not None
    assert run(workload, ctx, seed=3).status == STATUS_OK


def _tight(table: str, tmp_path, factor: float) -> str:
    """The calibration file with every e_max and e_mean multiplied by `factor`."""
    doc = json.loads(Path(table).read_text())
    doc["entries"] = [{**e, "e_max": e["e_max"] * factor, **({"e_mean": e["e_mean"] * factor} if "e_mean" in e else {})}
                      for e in doc["entries"]]  # fmt: skip
    path = tmp_path / f"tight-{factor}.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_calibration_file_too_tight_for_clean_products_is_refused_not_flagging(dtype, table_path, tmp_path):
    """e_max x 10^-3 is inside the legal range, and clean cases were flagged `mismatch` on every healthy
    unit (issue 43). Now a clean product of the unit's pool is held to it first, in `prepare`: the file
    is refused (InputRefused: exit 2, the run void), so no case runs with it; the file as shipped passes."""
    with pytest.raises(InputRefused, match=r"clean product of this unit's operands reached .* too tight"):
        make(dtype, _tight(table_path, tmp_path, 1e-3))
    workload, ctx = make(dtype, table_path)
    assert run(workload, ctx, 1).status == "ok" and not any("clean product" in n for n in ctx.notes)


def test_a_cached_e_max_too_tight_for_clean_products_is_measured_again(tmp_path, monkeypatch):
    """A cache entry that a clean product crosses is discarded and e_max measured afresh; cases pass."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(calibrate, "SHIPPED_TABLE", "data/no-such-table.json")
    workload, ctx = make("float32", "")  # measured fresh, then cached
    (cached,) = calibrate.calibration_cache_dir().iterdir()
    doc = json.loads(cached.read_text())
    for entry in doc["entries"]:
        entry["e_max"] *= 1e-3
        entry["e_mean"] *= 1e-3
    cached.write_text(json.dumps(doc))
    workload, ctx = make("float32", "")
    assert any("cache entry was discarded" in n for n in ctx.notes), ctx.notes
    assert workload.thresholds[0] is not None and workload.thresholds[0].source == "fresh"
    assert run(workload, ctx, 1).status == "ok"


@pytest.mark.parametrize("block", [1, REPEATS])
@pytest.mark.parametrize(("dtype", "checker"), [("bfloat16", "float32"), ("float32", "float64")])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_fused_block_check_finds_what_the_loop_that_read_every_repeat_finds(
    dtype, checker, fault, block, table_path, monkeypatch
):
    """The fused kernel (sdcscan/checks/tile_verdicts.py, in Triton's interpreter) in the workload as a GPU
    runs it: status, digest, failing rows and columns and the records as the reference loop's, the ratio
    within the checker's rounding of its."""
    m, _, n = SHAPES[dtype]
    output_bytes = m * n * torch.empty((), dtype=gemm_fp.DTYPES[dtype]).element_size()
    monkeypatch.setitem(base.CHECK_BLOCK_BYTES, "cpu", block * output_bytes)
    monkeypatch.setattr(gemm_fp, "RepeatTally", functools.partial(gemm_fp.RepeatTally, every_block=True))
    spec, flips = FAULTS[fault]
    outcomes = []
    for cls, kernel in ((gemm_fp.GemmFp, "fused"), (SynchronisingGemmFp, "torch")):
        workload, ctx = make(
            dtype, table_path, repeats=[REPEATS], checkers=[checker], check_kernel=kernel, workload_cls=cls
        )
        assert not ctx.notes, ctx.notes
        flip_outputs(ctx, flips)
        outcomes.append(run(workload, ctx, 3, spec))
    new, old = outcomes
    assert new.detail["check_kernel"] == "fused"
    assert (new.status, new.digest) == (old.status, old.digest)
    assert (new.detail["bad_rows"], new.detail["bad_columns"]) == (
        old.detail["bad_rows"],
        old.detail["bad_columns"],
    )
    assert new.detail["max_ratio"] == pytest.approx(old.detail["max_ratio"], rel=1e-3)
    assert new.mismatches == first_repeat_records(old.mismatches)
    assert (new.status == STATUS_MISMATCH) is (fault != "clean")


def test_a_cpu_checks_its_blocks_by_torch_unless_the_kernel_is_asked_for(table_path):
    workload, ctx = make("bfloat16", table_path)
    assert run(workload, ctx, 1).detail["check_kernel"] == "torch"
