"""The fingerprint's keys inside a Triton kernel: K_i = splitmix64(i + 1) | 1 for word i, as
`digest.fingerprint_keys` builds them in torch (sdcscan/checks/counter_rng.py's splitmix64), computed
where a fused check kernel reads each word instead of read from a key vector as long as the output.
Imported only where a kernel runs: it imports Triton."""

from __future__ import annotations

import triton
import triton.language as tl

# splitmix64's constants, as the uint64 literals Triton takes them for; a kernel reads a global only as
# a tl.constexpr (the interpreter takes a plain int, the compiler refuses it)
_GOLDEN = tl.constexpr(0x9E3779B97F4A7C15)
_MIX1 = tl.constexpr(0xBF58476D1CE4E5B9)
_MIX2 = tl.constexpr(0x94D049BB133111EB)


@triton.jit  # type: ignore[untyped-decorator,unused-ignore]
def keyed(words: tl.tensor, index: tl.tensor) -> tl.tensor:
    """Each 64-bit word times its key (int64 `words`, int64 flat word `index`), as uint64: their sum
    mod 2^64 is the fingerprint's keyed sum."""
    z = (index + 1).to(tl.uint64, bitcast=True) * _GOLDEN
    z = (z ^ (z >> 30)) * _MIX1
    z = (z ^ (z >> 27)) * _MIX2
    return words.to(tl.uint64, bitcast=True) * ((z ^ (z >> 31)) | 1)
