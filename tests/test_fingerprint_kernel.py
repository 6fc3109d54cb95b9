"""The fingerprint's Triton kernel gives torch's keyed sums bit for bit, through the digests that ship.

The kernel runs here in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py); on a GPU the
worker chooses it as a unit starts (`keyed_sums.choose`), and tests/test_fused_kernels_compile.py
compiles it for Hopper and Ampere.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("triton")

from sdcscan.checks import digest, fingerprint_triton, keyed_sums

CPU = torch.device("cpu")
SPAN = keyed_sums.BLOCK * keyed_sums.TILES  # the words one program sums


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(keyed_sums, "_CHOSEN", {})
    yield


def _words(rows: int, width: int, seed: int) -> torch.Tensor:
    """(rows, width) int64 words of every bit pattern."""
    g = torch.Generator().manual_seed(seed)
    halves = torch.randint(-(2**31), 2**31, (rows, 2 * width), generator=g, dtype=torch.int64)
    return halves.to(torch.int32).view(torch.int64)


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """Record every launch of the kernel (the words' shape) while it still runs."""
    seen: list[tuple[int, ...]] = []
    launch = fingerprint_triton.partials

    def counted(words: torch.Tensor, *rest: int) -> torch.Tensor:
        seen.append(tuple(words.shape))
        return launch(words, *rest)

    monkeypatch.setattr(fingerprint_triton, "partials", counted)
    return seen


@pytest.mark.parametrize(
    ("rows", "width"), [(1, 1), (1, 7), (3, SPAN), (2, 2 * SPAN + 1), (5, SPAN - 1), (1, 3 * SPAN + 17)]
)
def test_the_kernel_sums_are_torchs_bit_for_bit(rows: int, width: int) -> None:
    words = _words(rows, width, rows * 1000 + width)
    assert torch.equal(keyed_sums.by_kernel(words), keyed_sums.by_torch(words))


def test_one_flipped_bit_anywhere_changes_its_rows_sum_and_no_other() -> None:
    words = _words(3, 2 * SPAN + 9, 5)
    clean = keyed_sums.by_kernel(words)
    assert torch.equal(keyed_sums.by_kernel(words.clone()), clean)  # silent on the same bits
    for row, col, bit in [(0, 0, 0), (1, SPAN, 63), (2, 2 * SPAN + 8, 31), (1, SPAN - 1, 17)]:
        struck = words.clone()
        struck[row, col] ^= 1 << bit if bit < 63 else -(2**63)
        sums = keyed_sums.by_kernel(struck)
        assert sums[row] != clean[row]
        assert torch.equal(
            torch.cat([sums[:row], sums[row + 1 :]]), torch.cat([clean[:row], clean[row + 1 :]])
        )


def test_two_swapped_words_change_the_sum() -> None:
    """The keys depend on the word's place: an address fault that swaps two words is seen."""
    words = _words(1, SPAN + 40, 9)
    swapped = words.clone()
    swapped[0, [3, SPAN + 20]] = swapped[0, [SPAN + 20, 3]]
    assert keyed_sums.by_kernel(swapped)[0] != keyed_sums.by_kernel(words)[0]


def _digests(outs: torch.Tensor) -> tuple[str, str, str]:
    repeats = digest.RepeatDigest()
    repeats.add_stack(outs)
    single = digest.RepeatDigest()
    for out in outs:
        single.add(out)
    return repeats.hexdigest(), single.hexdigest(), digest.Fingerprint().tensor(outs[0]).hexdigest()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64, torch.int32])
def test_the_digests_that_ship_are_the_same_by_either_path_and_the_kernel_ran(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(3)
    outs = (torch.randn((3, 40, 72), generator=g) * 1000).to(dtype)
    outs[2, 5, 7] += 1  # a repeat that differs is folded in by index
    assert keyed_sums.choose(CPU, "torch") == ""
    by_torch = _digests(outs)
    launches = _launches(monkeypatch)
    assert keyed_sums.choose(CPU, "fused") == ""  # the interpreter: its start-up trial passed
    launches.clear()
    assert _digests(outs) == by_torch
    assert (
        launches == [(3, 40 * 72 * outs.element_size() // 8)] + [(1, 40 * 72 * outs.element_size() // 8)] * 4
    )


def test_auto_keeps_torch_until_a_gpu_has_matched_the_kernel_and_the_cost_model_counts_what_is_asked() -> (
    None
):
    """No lent GPU has run the kernel (triton_kernels.MATCHED_ON_A_GPU): "auto" keeps torch on a CPU and on
    a GPU, for which the meta device stands; asked for, the model counts the kernel."""
    meta = torch.device("meta")
    assert keyed_sums.choose(CPU) == "" and not keyed_sums.chosen(CPU)
    assert keyed_sums.choose(meta) == "" and not keyed_sums.chosen(meta)
    assert keyed_sums.choose(meta, "fused") == "" and keyed_sums.chosen(meta)
    sums = digest.RepeatDigest()
    sums.add_stack(torch.empty((4, 64, 64), dtype=torch.bfloat16, device="meta"))
    assert sums.sums().shape == (4,)


def test_a_kernel_that_disagrees_is_refused_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyed_sums, "by_kernel", lambda words: keyed_sums.by_torch(words) + 1)
    why = keyed_sums.choose(CPU, "fused")
    assert "failed its start-up trial" in why and "fingerprint" in why
    assert not keyed_sums.chosen(CPU)


def test_without_the_interpreter_a_cpu_is_told_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET")
    why = keyed_sums.choose(CPU, "fused")
    assert "TRITON_INTERPRET=1" in why and not keyed_sums.chosen(CPU)


def test_the_operator_refuses_words_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        keyed_sums.by_kernel(_words(4, 6, 1)[:, ::2])
