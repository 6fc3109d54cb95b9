"""The fingerprint's keyed sums: Σ w_i·K_i mod 2^64 over a tensor's 64-bit words w_i (sdcscan/checks/digest.py),
by torch ops or by one Triton kernel that reads each word once (issue 42).

In torch on a GPU the sum is a product and a reduction: the words and the key vector are read and the
product written and read again, three times the tensor's bytes beside the kernel's one (2 of the 10 bytes
gemm_fp's bf16 check moved per output byte, by the cost model). The kernel (fingerprint_triton.py)
computes each key where it reads the word; it is registered as `sdcscan::keyed_partials` so that the cost
model counts it as the kernel it is. Sums mod 2^64 do not depend on their order, so the kernel's are
torch's bit for bit.

Which path a device takes is chosen once per process (`choose`, by the worker as a unit starts, and by the
cost model for the meta device). The kernel is not yet a GPU's default: no lent GPU has run it
(`triton_kernels.MATCHED_ON_A_GPU`); scripts/check_fused.py asks for it ("fused") and compares it. Where it
is asked for, it runs where Triton is installed and it agrees with torch on a small input; elsewhere torch.
On a CPU the kernel runs only in Triton's interpreter, which is how the tests hold it to the torch path.
"""

from __future__ import annotations

import torch

from sdcscan.checks import triton_kernels
from sdcscan.checks.counter_rng import splitmix64

BLOCK, TILES, NUM_WARPS = 1024, 8, 4  # 8,192 words (64 KB) a program, summed as 1,024 lanes

_CHOSEN: dict[torch.device, bool] = {}  # device -> whether its keyed sums are taken by the kernel
_KEYS: dict[torch.device, torch.Tensor] = {}  # device -> the longest key vector built there so far


def of(words: torch.Tensor) -> torch.Tensor:
    """(R,) int64: Σ_i w_ri·K_i mod 2^64 for each row of contiguous (R, W) int64 `words`, on their device:
    by the kernel where `choose` took it for the device, else by torch ops."""
    return by_kernel(words) if chosen(words.device) else by_torch(words)


def choose(device: torch.device, asked: str = "auto") -> str:
    """Decide whether `device`'s keyed sums are taken by the kernel from now on; a note for the unit where
    it was asked for (or would be the default) and cannot run, else ''. `asked` as a workload's
    `check_kernel` (sdcscan/checks/triton_kernels.py): "auto" takes it on a GPU only."""
    take, why = triton_kernels.choose(asked, device, "fingerprint", lambda: agrees_on_small_words(device))
    _CHOSEN[device] = take
    return why


def chosen(device: torch.device) -> bool:
    """Whether keyed sums on `device` go through the kernel, as `choose` last decided (torch until then)."""
    return _CHOSEN.get(device, False)


def by_kernel(words: torch.Tensor) -> torch.Tensor:
    """`of(words)` by the kernel's partial sums, added up by torch."""
    partials: torch.Tensor = torch.ops.sdcscan.keyed_partials(words)
    return partials.sum(1)  # int64 sums wrap mod 2^64 on every device


def by_torch(words: torch.Tensor) -> torch.Tensor:
    """`of(words)` by torch ops and the key vector."""
    keys = fingerprint_keys(words.shape[1], words.device)
    if words.device.type == "cpu":
        return torch.mv(words, keys)  # integer matrix-vector product on the CPU: no temporary
    return (words * keys).sum(1)  # int64 products and sums wrap mod 2^64 on every device


def fingerprint_keys(count: int, device: torch.device) -> torch.Tensor:
    """The first `count` keys K_i = splitmix64(i) | 1 (i = 1, 2, ...), the same on every host and device,
    built once per device and kept.

    Built where they are used, by a few elementwise kernels (sdcscan.checks.counter_rng): on a GPU the
    host neither computes them nor copies them (2^26 keys took seconds of one host thread in numpy).
    """
    have = _KEYS.get(device)
    if have is None or have.numel() < count:
        size = 1 << max(10, (count - 1).bit_length())
        have = _KEYS[device] = splitmix64(torch.arange(1, size + 1, dtype=torch.int64, device=device)) | 1
    return have[:count]


def agrees_on_small_words(device: torch.device) -> bool:
    """The kernel against the torch sums on `device`, for rows shorter and longer than a program's share
    of words and words of every bit pattern: what a unit runs once at start-up."""
    g = torch.Generator().manual_seed(42)
    halves = torch.randint(-(2**31), 2**31, (3, 2 * (BLOCK * TILES + 5)), generator=g, dtype=torch.int64)
    words = halves.to(torch.int32).view(torch.int64).to(device)
    return all(torch.equal(by_kernel(w), by_torch(w)) for w in (words, words[:, :7].contiguous()))


@torch.library.custom_op("sdcscan::keyed_partials", mutates_args=())
def _partials(words: torch.Tensor) -> torch.Tensor:
    """The kernel: (R, chunks) keyed sums, a row's chunks summing to its keyed sum."""
    if words.dtype != torch.int64 or words.dim() != 2 or not words.is_contiguous():
        raise ValueError("keyed sums: contiguous (rows, words) int64 words are needed")
    from sdcscan.checks import fingerprint_triton  # imports Triton: only where the kernel runs

    return fingerprint_triton.partials(words, BLOCK, TILES, NUM_WARPS)


@_partials.register_fake
def _(words: torch.Tensor) -> torch.Tensor:
    return words.new_empty((words.shape[0], max(1, -(-words.shape[1] // (BLOCK * TILES)))))
