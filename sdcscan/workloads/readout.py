"""One wait for the device per case: a case's small results (counts, flags, fingerprint sums, a loss)
gathered into one int64 tensor and copied to the host together.

On a GPU each read of a device value makes the host wait for every kernel queued before it; a case
that reads one flag per repeat stops the GPU once per repeat. A workload keeps its results on the device
as it goes and reads them here, once, after its last kernel.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import torch


def words_of(t: torch.Tensor) -> torch.Tensor:
    """A tensor's values as int64 words for `read_once`: integers and booleans widened, floating-point
    values as the bits of their float64 (exact), read back with `float_of`."""
    if t.is_floating_point():
        return t.detach().to(torch.float64).reshape(-1).view(torch.int64)
    return t.detach().to(torch.int64).reshape(-1)


def read_once(parts: Sequence[torch.Tensor]) -> list[list[int]]:
    """Each part's `words_of`, copied to the host in one wait; empty parts give empty lists."""
    flat = [words_of(p) for p in parts]
    filled = [f for f in flat if f.numel()]  # an empty part is never copied between devices
    if not filled:
        return [[] for _ in flat]
    values = torch.cat([f.to(filled[0].device) for f in filled]).tolist()
    found, at = [], 0
    for f in flat:
        found.append(values[at : at + f.numel()])
        at += f.numel()
    return found


def float_of(word: int) -> float:
    """The float64 whose bits `words_of` gave as `word`."""
    return float(struct.unpack("<d", struct.pack("<q", word))[0])
