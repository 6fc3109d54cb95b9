"""Digests: short hashes of the exact bits of tensors and scalars, comparable across units and hosts."""

from __future__ import annotations

import hashlib
from typing import Any

DIGEST_BYTES = 8  # 16 hex characters: collisions are irrelevant, a digest only has to differ when bits do


class Digest:
    """Incremental blake2b over tensors' dtype, shape and little-endian bytes."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=DIGEST_BYTES)

    def tensor(self, t: Any) -> Digest:
        import torch

        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        flat = t.contiguous().reshape(-1)
        self._h.update(f"{flat.dtype}:{tuple(t.shape)}:".encode())
        self._h.update(memoryview(flat.view(torch.uint8).numpy()))
        return self

    def bytes(self, data: bytes) -> Digest:
        self._h.update(data)
        return self

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class RepeatDigest:
    """The digest of a case whose repeats recompute the same product: every repeat counts.

    The first repeat's output is hashed and kept; a later repeat costs one comparison with it and is
    hashed (with its index) only where its bits differ. A correct deterministic unit therefore has the
    digest of one output, and a fault in any repeat changes the digest, so consensus and re-runs see it.
    """

    def __init__(self) -> None:
        self._digest = Digest()
        self._first: Any = None
        self._count = 0

    def add(self, out: Any) -> None:
        """Fold in the output of the next repeat (the caller must not modify it afterwards)."""
        import torch

        if self._first is None:
            self._first = out
            self._digest.tensor(out)
        elif not _same_bits(out, self._first, torch):
            self._digest.bytes(f"repeat {self._count} differs:".encode()).tensor(out)
        self._count += 1

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def _same_bits(x: Any, y: Any, torch: Any) -> bool:
    """Bitwise equality: NaN payloads and the sign of zero count, unlike `torch.equal` on floats."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return bool(torch.equal(x.contiguous().view(words), y.contiguous().view(words)))
