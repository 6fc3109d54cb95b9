"""The fused int8 check kernel (sdcscan/checks/int8_triton.py) gives, bit for bit, the sums and verdicts of
the torch check it may replace on a GPU (issue 42): clean, under every self-test output model, on words
no product makes, on shapes that leave partial tiles and strips, and through the whole gemm_int8 case.

The kernel runs here in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py before anything
imports Triton),
the same kernel source a GPU compiles; a lent GPU repeats the comparison compiled
(scripts/check_fused.py). Without Triton installed these tests skip; CI installs it (the test extra).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest
import torch

from sdcscan.checks import int8, int8_block, triton_kernels
from sdcscan.faults import FaultSpec, corrupt_, from_label
from sdcscan.outcomes import Case
from sdcscan.workloads.base import Context
from sdcscan.workloads.gemm_int8.workload import GemmInt8
from tests.helpers.tools import missing_tool


@pytest.fixture(autouse=True)
def _triton() -> None:
    if importlib.util.find_spec("triton") is None:
        missing_tool("Triton", "pip install -e '.[test]' on Linux x86_64")


SUMS = ("rows", "weighted", "columns", "pad_nonzero", "fingerprint")


def _same_sums(block: torch.Tensor, n: int, pad_start: int) -> list[str]:
    """The names of the sums in which the kernel and the torch ops differ (dtype or any bit)."""
    fused, ref = int8_block.fused(block, n, pad_start), int8_block.reference(block, n, pad_start)
    return [
        name
        for name in SUMS
        if getattr(fused, name).dtype != getattr(ref, name).dtype
        or not torch.equal(getattr(fused, name), getattr(ref, name))
    ]


@pytest.mark.parametrize(
    ("rows", "n_ext", "n", "pad_start"),
    [
        (1, 8, 3, 6),  # one row, a strip of 4 words
        (7, 40, 33, 38),  # n odd: a word half data, half checksum
        (300, 520, 500, 512),  # two row groups, the second partial; a partial second strip
        (17, 1040, 1000, 1032),  # three strips, one row tile partial
    ],
)
def test_the_kernel_sums_words_of_every_value_as_the_torch_ops_do(
    rows: int, n_ext: int, n: int, pad_start: int
) -> None:
    """Full-range int32 words, ±2^31 edges, non-zero padding in some rows: every sum equal."""
    g = torch.Generator().manual_seed(rows * 1000 + n_ext)
    block = torch.randint(-(2**31), 2**31, (rows, n_ext), generator=g, dtype=torch.int64).to(torch.int32)
    block[:, pad_start:] = 0
    block[0, :] = -(2**31)
    block[-1, : n_ext // 2] = 2**31 - 1
    block[rows // 2, n_ext - 1] = 1  # a padding word set: only this row's flag
    assert _same_sums(block, n, pad_start) == []
    flags = int8_block.fused(block, n, pad_start).pad_nonzero.tolist()
    assert flags == [i in {0, rows // 2} for i in range(rows)]  # row 0's padding is -2^31


def _products(m: int, k: int, n: int, scheme: str, tags: int) -> tuple[torch.Tensor, int8.Layout]:
    """A clean tagged product of the shapes the self-test uses, exact in fp64."""
    g = torch.Generator().manual_seed(m * 7 + n + tags)
    data = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    a = torch.zeros((m, int8.tagged_width(k, tags)), dtype=torch.uint8)
    a[:, :k] = data
    if tags:
        a[:, k : k + tags] = int8.row_tags(torch.arange(m), tags)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    w_ext = int8.encode_weight(w, scheme, tags)
    return (a.double() @ w_ext.double().t()).to(torch.int32), int8.layout(n, scheme, tags)


def _struck(scheme: str) -> Iterator[tuple[str, torch.Tensor, int8.Layout]]:
    """Clean products, then every self-test output model struck three times at its variant's shape."""
    for shape in ((8, 64, 40), (64, 64, 256), (4, 64, 1500)):
        c, lay = _products(*shape, scheme, tags=1)
        yield f"clean {shape}", c, lay
    for variant, (m, k, n) in ((scheme, (8, 64, 40)), (f"{scheme}_wide", (64, 64, 256))):
        for i, label in enumerate(GemmInt8.selftest_bits(variant, "output")):
            c, lay = _products(m, k, n, scheme, tags=1)
            for repeat in range(3):
                corrupt_(c, from_label(label, "output", 1000 * i + repeat), columns=n)
            yield f"{label} x3", c, lay


@pytest.mark.parametrize("scheme", int8.SCHEMES)
def test_the_fused_row_checks_are_the_torch_ones_under_every_self_test_output_model(scheme: str) -> None:
    """Every field of check_rows, and the fingerprint, the same by either path, clean and struck."""
    for what, c, lay in _struck(scheme):
        expected = torch.arange(c.shape[0], dtype=torch.float64)
        torch_path = int8.check_rows(c, lay, expected_tags=expected)
        fused_path = int8.check_rows(c, lay, expected_tags=expected, fused=True)
        for field in ("bad", "weighted_sum", "weighted_checksum", "column_sums", "fingerprint", "tag_bad"):
            assert torch.equal(getattr(fused_path, field), getattr(torch_path, field)), (what, field)
        for field in ("bad", "data_sum", "checksum", "pad_nonzero"):
            assert torch.equal(getattr(fused_path.row, field), getattr(torch_path.row, field)), (what, field)


def test_the_fused_kernel_refuses_a_block_it_would_misread() -> None:
    """A strided view or an odd width is not whole 64-bit words: refused, never read wrongly."""
    block = torch.zeros((4, 16), dtype=torch.int32)
    with pytest.raises(ValueError, match="contiguous int32 block of even width"):
        int8_block.fused(block[:, :8], 5, 6)
    with pytest.raises(ValueError, match="contiguous int32 block of even width"):
        int8_block.fused(torch.zeros((4, 7), dtype=torch.int32), 5, 6)


def _case(check_kernel: str, armed: FaultSpec | None, occurrence: int) -> tuple[object, ...]:
    """One gemm_int8 case on this CPU with the given check kernel: its verdict, digest, findings."""
    params = {
        **GemmInt8.spec.defaults,
        **GemmInt8.spec.tiny,
        "ops_per_case": 4.0e5,
        "check_kernel": check_kernel,
    }
    workload = GemmInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=11, params=params)
    workload.prepare(ctx)
    ctx.begin_case(armed)
    out = workload.run(ctx, Case(occurrence, "gemm_int8", 4242 + occurrence, occurrence, params))
    detail = {k: v for k, v in out.detail.items() if k != "check_kernel"}
    assert out.detail["check_kernel"] == check_kernel
    return out.status, out.digest, [m.where for m in out.mismatches], detail


@pytest.mark.parametrize(
    ("occurrence", "label"),
    [(o, label) for o in (0, 1) for label in (None, 30, 3, "swap_in_row", "burst:4")]
    + [(1, "row_swap"), (1, "row_address_bit")],  # occurrence 0 is one row: nothing to move
)
def test_a_gemm_int8_case_is_the_same_with_either_check_kernel(
    occurrence: int, label: int | str | None
) -> None:
    """The shipped case, clean and with an output fault armed: the same verdict, digest and findings."""
    armed = None if label is None else from_label(label, "output", 77)
    torch_case = _case("torch", armed, occurrence)
    assert _case("fused", armed, occurrence) == torch_case
    assert (torch_case[0] == "ok") == (label is None)


def test_the_fused_kernel_asked_for_where_triton_cannot_run_says_so_and_the_torch_check_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CPU without the interpreter: a note, and the torch check (the verdict never depends on it)."""
    monkeypatch.delenv("TRITON_INTERPRET")
    assert "TRITON_INTERPRET=1" in triton_kernels.unavailable(torch.device("cpu"))
    params = {**GemmInt8.spec.defaults, **GemmInt8.spec.tiny, "check_kernel": "fused"}
    workload = GemmInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=11, params=params)
    workload.prepare(ctx)
    assert not workload.fused
    assert any("fused check kernel cannot run" in note for note in ctx.notes)
    monkeypatch.setattr(triton_kernels.importlib.util, "find_spec", lambda name: None)
    assert triton_kernels.unavailable(torch.device("cuda")) == "Triton is not installed"


@pytest.mark.parametrize(
    ("asked", "device", "triton", "fused", "noted"),
    [
        ("auto", "cuda", True, True, False),  # the default on a GPU: the kernel an H200 matched
        ("auto", "meta", True, True, False),  # the cost model counts what a GPU runs
        ("auto", "cpu", True, False, False),  # never the interpreter on a CPU unit, and nothing to say
        ("auto", "cuda", False, False, True),  # a GPU without Triton: torch checks, and the note says why
        ("fused", "cpu", True, True, False),  # asked for: the interpreter (TRITON_INTERPRET=1 here)
        ("fused", "cuda", False, False, True),
        ("torch", "cuda", True, False, False),
    ],
)
def test_the_check_kernel_switch_takes_the_fused_kernel_by_default_on_a_gpu_only(
    monkeypatch: pytest.MonkeyPatch, asked: str, device: str, triton: bool, fused: bool, noted: bool
) -> None:
    if not triton:
        monkeypatch.setattr(triton_kernels.importlib.util, "find_spec", lambda name: None)
    taken, note = triton_kernels.choose(asked, torch.device(device), "gemm_int8")
    assert (taken, bool(note)) == (fused, noted)
    assert GemmInt8.spec.defaults["check_kernel"] == "auto"


@pytest.mark.parametrize("label", [None, 30, "row_swap", "burst:4"])
def test_a_case_padded_as_on_a_gpu_is_checked_alike_by_either_kernel(
    monkeypatch: pytest.MonkeyPatch, label: int | str | None
) -> None:
    """With a GPU's padding to 32 (int8.row_multiple) on this CPU: clean cases pass, struck ones fail, and
    both check kernels agree on the verdict, digest and findings."""
    asked = []
    monkeypatch.setattr(int8, "row_multiple", lambda device: asked.append(device) or int8.GPU_ROW_MULTIPLE)
    armed = None if label is None else from_label(label, "output", 77)
    torch_case = _case("torch", armed, 1)
    assert _case("fused", armed, 1) == torch_case
    assert (torch_case[0] == "ok") == (label is None)
    assert len(asked) == 2  # each workload padded as a GPU would


def _prepared_gemm_int8(check_kernel: str) -> tuple[GemmInt8, Context]:
    params = {**GemmInt8.spec.defaults, **GemmInt8.spec.tiny, "check_kernel": check_kernel}
    workload = GemmInt8(params)
    ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=11, params=params)
    workload.prepare(ctx)
    return workload, ctx


@pytest.mark.parametrize("breakage", ["raises", "differs"])
def test_a_fused_kernel_that_fails_its_start_up_trial_leaves_the_torch_check_and_a_note(
    monkeypatch: pytest.MonkeyPatch, breakage: str
) -> None:
    """The kernel runs once at prepare against the torch sums: one that cannot compile or launch on this
    GPU, driver or Triton, or that gives other sums, is not used, and the unit's notes say why. The real
    kernel passes the trial (in the interpreter here)."""
    assert int8_block.agrees_on_a_small_block(torch.device("cpu"))
    workload, ctx = _prepared_gemm_int8("fused")
    assert workload.fused and not ctx.notes
    real = int8_block.fused

    def broken(block: torch.Tensor, n: int, pad_start: int) -> int8_block.BlockSums:
        if breakage == "raises":
            raise RuntimeError("PTX JIT compilation failed\nmore lines")
        sums = real(block, n, pad_start)
        return dataclasses.replace(sums, weighted=sums.weighted + 1)

    monkeypatch.setattr(int8_block, "fused", broken)
    workload, ctx = _prepared_gemm_int8("fused")
    assert not workload.fused
    (note,) = ctx.notes
    assert "failed its start-up trial" in note and "torch checks" in note
    assert ("PTX JIT compilation failed" in note) == (breakage == "raises") and "more lines" not in note
