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
