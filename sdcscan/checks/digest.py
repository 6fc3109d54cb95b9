"""Digests: short hashes of the exact bits of tensors and scalars, comparable across units and hosts."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:  # torch is imported where a digest is taken, not with this module
    import torch

DIGEST_BYTES = 8  # 16 hex characters: collisions are irrelevant, a digest only has to differ when bits do


class Digest:
    """Incremental blake2b over tensors' dtype, shape and little-endian bytes."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=DIGEST_BYTES)

    def tensor(self, t: torch.Tensor) -> Digest:
        import torch

        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        flat = t.contiguous().reshape(-1)
        self._h.update(_header(t))
        self._h.update(flat.view(torch.uint8).numpy().data)  # the array's buffer, as a memoryview
        return self

    def bytes(self, data: bytes) -> Digest:
        self._h.update(data)
        return self

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class RepeatDigest:
    """The digest of a case whose repeats recompute the same product: every repeat counts.

    Every repeat's output is fingerprinted where it lies (`fingerprint_words`); at the end the first
    fingerprint is digested and every later one compared with it, and a repeat whose bits differ is
    folded in with its index. A correct deterministic unit therefore has the digest of one output, and
    a fault in any repeat changes the digest, so consensus and re-runs see it. Nothing waits for the
    device before `hexdigest`, and no output is copied to the host: on a GPU the repeats run back to
    back (hashing one 8192² output's bytes on the host took longer than its GEMM).
    """

    def __init__(self) -> None:
        self._first: bytes | None = None  # dtype and shape of the first output
        self._fingerprints: list[torch.Tensor] = []  # one device scalar per repeat

    def add(self, out: torch.Tensor) -> None:
        """Fold in the output of the next repeat."""
        if self._first is None:
            self._first = _header(out)
        self._fingerprints.append(fingerprint_words(out).view(1))

    def add_stack(self, outs: torch.Tensor) -> None:
        """Fold in the outputs of the next len(outs) repeats, stacked along dim 0: as many `add`s, in
        one reduction where each output is a whole number of 64-bit words."""
        import torch

        if not len(outs):
            return
        if self._first is None:
            self._first = _header(outs[0])
        if outs[0].numel() * outs.element_size() % 8:
            self._fingerprints.extend(fingerprint_words(out).view(1) for out in outs)
            return
        words = outs.detach().contiguous().view(len(outs), -1).view(torch.uint8).view(torch.int64)
        self._fingerprints.append(_keyed_sums(words))

    def add_fingerprints(self, outs: torch.Tensor, sums: torch.Tensor) -> None:
        """Fold in the next len(outs) repeats by their fingerprints (R,) int64, taken by the caller as
        `add_stack` takes them (a fused check kernel reads each output once for its checks and these)."""
        if not len(outs):
            return
        if self._first is None:
            self._first = _header(outs[0])
        self._fingerprints.append(sums)

    def sums(self) -> torch.Tensor:
        """(repeats,) int64 fingerprints on the device, for a caller that reads them with its own results
        in one wait (`hexdigest_of`)."""
        import torch

        if not self._fingerprints:
            return torch.zeros(0, dtype=torch.int64)
        return torch.cat(self._fingerprints)

    def hexdigest(self) -> str:
        return self.hexdigest_of(self.sums().tolist())  # the one wait for the device

    def hexdigest_of(self, values: list[int]) -> str:
        """The digest, given the `sums()` as read by the caller."""
        h = hashlib.blake2b(digest_size=DIGEST_BYTES)
        if self._first is None:
            return h.hexdigest()
        h.update(self._first + _sum_bytes(values[0]))
        for index, value in enumerate(values[1:], start=1):
            if value != values[0]:
                h.update(f"repeat {index} differs: {value}".encode())
        return h.hexdigest()


class Fingerprint:
    """A digest of exact bits computed where the tensors live: one pass over each tensor, no copy to
    the host and no wait for the device until `hexdigest`.

    Each tensor's bytes, read as little-endian 64-bit words w_i, are reduced to Σ w_i·K_i mod 2^64 with
    fixed odd keys K_i (`fingerprint_words`); the sums, dtypes and shapes then go through blake2b. For
    large outputs this costs about a tenth of hashing their bytes on the host (4 MB: 0.4 ms against
    4.5 ms on one AVX-512 core), and on a GPU the output never leaves the device. A change of one word
    always changes its sum (K_i is odd); several changed words escape with probability about 2^-64
    (2^-32 when every change is a multiple of 2^32), and their order counts (the keys depend on i).
    """

    def __init__(self) -> None:
        self._parts: list[_Part] = []

    def tensor(self, t: torch.Tensor) -> Fingerprint:
        self._parts.append(("meta", _header(t)))
        self._parts.append(("sum", fingerprint_words(t)))
        return self

    def summed(self, t: torch.Tensor, words_sum: torch.Tensor) -> Fingerprint:
        """As `tensor(t)`, where the caller has `fingerprint_words(t)` already (a fused check kernel
        computes it while it reads t for its own sums)."""
        self._parts.append(("meta", _header(t)))
        self._parts.append(("sum", words_sum))
        return self

    def bytes(self, data: bytes) -> Fingerprint:
        self._parts.append(("meta", data))
        return self

    def sums(self) -> torch.Tensor:
        """(parts,) int64: every tensor's fingerprint sum, on the device, for a caller that reads them
        with its own results in one wait (`hexdigest_of`)."""
        import torch

        found = [part[1] for part in self._parts if part[0] == "sum"]
        if not found:
            return torch.zeros(0, dtype=torch.int64)
        return torch.stack([s.to(found[0].device) for s in found])

    def hexdigest(self) -> str:
        return self.hexdigest_of(self.sums().tolist())  # the one wait for the device

    def hexdigest_of(self, values: list[int]) -> str:
        """The digest, given the `sums()` as read by the caller."""
        found = iter(values)
        h = hashlib.blake2b(digest_size=DIGEST_BYTES)
        for part in self._parts:
            h.update(part[1] if part[0] == "meta" else _sum_bytes(next(found)))
        return h.hexdigest()


# What a Fingerprint folds in, in order: bytes as they are, or a tensor's sum (a device scalar).
_Part: TypeAlias = "tuple[Literal['meta'], bytes] | tuple[Literal['sum'], torch.Tensor]"


def _header(t: torch.Tensor) -> bytes:
    """What a digest records of a tensor besides its bits: dtype and shape."""
    return f"{t.dtype}:{tuple(t.shape)}:".encode()


def _sum_bytes(value: int) -> bytes:
    """A fingerprint sum (a signed int64) as the 8 bytes that are hashed."""
    return value.to_bytes(8, "little", signed=True)


def fingerprint_words(t: torch.Tensor) -> torch.Tensor:
    """Σ w_i·K_i mod 2^64 over the 64-bit words w_i of a tensor's bytes (zero-padded to a whole word),
    as a 0-dim int64 tensor on the tensor's device (no wait for it)."""
    import torch

    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() % 8:
        flat = torch.cat([flat, flat.new_zeros(8 - flat.numel() % 8)])
    return _keyed_sums(flat.view(torch.int64).view(1, -1))[0]


def _keyed_sums(words: torch.Tensor) -> torch.Tensor:
    """(R,) int64: Σ_i w_ri·K_i mod 2^64 for each row of contiguous (R, W) int64 words, on their device
    (`keyed_sums.of`, imported here: torch is not imported with this module)."""
    from sdcscan.checks import keyed_sums

    return keyed_sums.of(words)
