"""The dispatch mode that counts what a workload's code would make a GPU do, run on the meta device.

Every aten operation a workload calls passes through `CostCounter.__torch_dispatch__`. An operation on
meta tensors (the unit's device in the model) is one kernel: the bytes it reads (its inputs' distinct
elements) and writes (its outputs), and for matrix products their FLOPs by operand dtype. An operation
whose tensors all live on the CPU is host work: on a GPU unit the device waits while the host does it.
An operation that needs a device value on the host is a host wait: `.item()`, `bool(t)`, `.tolist()`,
`torch.equal`, `nonzero`, a copy to the host, and a blocking copy from the host (`.to(device)` of
pageable memory, `torch.tensor(data, device=...)`). Since meta tensors hold no data, a wait answers as a
clean case would: zeros, False (True for an `all()`), equal, nothing found.

View operations (slices, transposes, reshapes of contiguous tensors) and allocations launch nothing and
cost nothing.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from sdcscan.checks import tf32
from sdcscan.checks.vabft import sum_converts

aten = torch.ops.aten
DEVICE = "meta"  # the unit's device in the model

# Operations that allocate or relabel memory and launch no kernel.
_FREE = {
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.detach.default,
    aten.alias.default,
    aten.lift_fresh.default,
    aten._unsafe_view.default,
    aten.set_.source_Storage_storage_offset,
}
# Operations whose answer the host must read: (what the wait is called, the answer of a clean case).
_WAITS: dict[Any, tuple[str, Callable[..., Any]]] = {
    aten._local_scalar_dense.default: ("item", lambda t: False if t.dtype == torch.bool else 0),
    aten.is_nonzero.default: ("bool", lambda t: False),
    aten.equal.default: ("torch.equal", lambda a, b: True),
    aten.nonzero.default: (
        "nonzero",
        lambda t: torch.empty((0, t.dim()), dtype=torch.int64, device=DEVICE),
    ),
    aten.masked_select.default: ("masked_select", lambda t, m: t.new_empty(0)),
}
_COPIES = {aten._to_copy.default, aten.copy_.default, aten._copy_from.default}
# `out=` variants without a Meta kernel in torch (2.13: matmul_golden's fp8 product): their functional op
# runs instead, for its checks of shapes and types, and `out`, already of the result's shape, is returned.
_FUNCTIONAL_OF = {aten._scaled_mm.out: aten._scaled_mm.default}


def _bag_read(packed: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, *rest: Any) -> int:
    """A quantized EmbeddingBag reads the rows it looks up, not its table: one packed row per index
    (rounded up to the 32-byte sectors device memory moves), and the indices and offsets."""
    row = -(-packed.shape[1] // 32) * 32
    weights = rest[3] if len(rest) > 3 and isinstance(rest[3], torch.Tensor) else None
    extra = _distinct_bytes(weights) if weights is not None else 0
    return indices.numel() * row + _distinct_bytes(indices) + _distinct_bytes(offsets) + extra


def _bag_output(bits: int) -> Callable[..., torch.Tensor]:
    """The meta kernel of a quantized EmbeddingBag (torch ships none): (bags, dim) float32, where a packed
    row is dim bytes and an fp32 scale and bias (8-bit), or dim / 2 bytes and an fp16 pair (4-bit)."""

    def output(
        packed: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, *rest: Any
    ) -> torch.Tensor:
        dim = packed.shape[1] - 8 if bits == 8 else (packed.shape[1] - 4) * 2
        return packed.new_empty((offsets.shape[0], dim), dtype=torch.float32)

    return output


def _gather_read(source: torch.Tensor, dim: int, index: torch.Tensor, *rest: Any) -> int:
    """torch.gather reads one element of its source per index."""
    return index.numel() * (source.element_size() + index.element_size())


def _index_select_read(source: torch.Tensor, dim: int, index: torch.Tensor) -> int:
    """index_select reads the slices it selects."""
    return source.numel() // max(
        1, source.shape[dim]
    ) * index.numel() * source.element_size() + _distinct_bytes(index)


# Operations whose reads are not their inputs' sizes: gathers read what they look up.
_GATHERS: dict[Any, Callable[..., int]] = {
    aten.gather.default: _gather_read,
    aten.index_select.default: _index_select_read,
}
_QUANTIZED = torch.library.Library("quantized", "IMPL")  # kept alive: it holds the registrations
_BAG_BITS: dict[Any, int] = {}  # the quantized EmbeddingBag operators -> their bits
for _bits, _op in ((8, "embedding_bag_byte_rowwise_offsets"), (4, "embedding_bag_4bit_rowwise_offsets")):
    _GATHERS[getattr(torch.ops.quantized, _op).default] = _bag_read
    _BAG_BITS[getattr(torch.ops.quantized, _op)] = _bits
    _QUANTIZED.impl(_op, _bag_output(_bits), "Meta")


@dataclass(frozen=True, slots=True)
class Kernel:
    """One launch: its operation, the bytes it moves (read + written), and its work by kind: matrix FLOPs
    by operand dtype ("int8/unaligned" for an int8 product whose width gets a slower kernel), or a quantized
    EmbeddingBag's lookups ("lookups/8bit", "lookups/4bit")."""

    op: str
    read: int
    written: int
    flops: float = 0.0
    flop_dtype: str = ""


@dataclass
class Tally:
    """What one phase of a workload did, as counted."""

    kernels: list[Kernel] = field(default_factory=list)
    waits: Counter[str] = field(default_factory=Counter)  # what made the host wait -> times
    host_ops: Counter[str] = field(default_factory=Counter)  # host tensor operations -> times
    host_bytes: int = 0  # bytes those host operations read and wrote
    to_device_bytes: int = 0  # bytes copied from the host to the device

    @property
    def host_waits(self) -> int:
        return sum(self.waits.values())

    @property
    def bytes_moved(self) -> int:
        return sum(k.read + k.written for k in self.kernels)

    @property
    def bytes_written(self) -> int:
        return sum(k.written for k in self.kernels)

    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    def ops(self) -> Counter[str]:
        """Kernels per operation name."""
        return Counter(k.op for k in self.kernels)


class CostCounter(TorchDispatchMode):
    """Counts kernels, bytes, FLOPs, host waits and host work, into the tally of the current `phase`."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.phase = "prepare"
        self.tallies: dict[str, Tally] = {}
        # Results of `all()` by id, held so the id stays theirs: read on the host, a clean case's `all`
        # is True (every scale is 2^-7, every element finite), where any other read answers 0 or False.
        self._all_true: dict[int, torch.Tensor] = {}

    @property
    def tally(self) -> Tally:
        return self.tallies.setdefault(self.phase, Tally())

    def wait(self, why: str) -> None:
        """Record a host wait for the device (also called by the `torch.tensor` shim below)."""
        self.tally.waits[why] += 1

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        inputs = _tensors((args, {k: v for k, v in kwargs.items() if k != "out"}))
        if func in _WAITS and any(_on_device(t) for t in inputs):
            why, answer = _WAITS[func]
            self.wait(why)
            return True if id(args[0]) in self._all_true else answer(*args)
        if func in _COPIES:
            return self._copy(func, args, kwargs)
        out = _call(func, args, kwargs)
        if func in _FREE or getattr(func, "is_view", False):
            return out
        if func.overloadpacket is aten.all and isinstance(out, torch.Tensor) and not out.dim():
            self._all_true[id(out)] = out
        outputs = _tensors(out)
        device_side = any(_on_device(t) for t in (*inputs, *outputs))
        moved_out = sum(_distinct_bytes(t) for t in outputs)
        if torch.Tag.pointwise in func.tags and outputs:
            moved_in = sum(_pointwise_read(t, outputs[0]) for t in inputs)
        else:
            moved_in = sum(_distinct_bytes(t) for t in inputs)
        if device_side:
            moved_in = _GATHERS[func](*args) if func in _GATHERS else moved_in
            flops, dtype = _flops(func, args, kwargs, out)
            widening = _widening_copy(func, args, out)
            if widening:
                self.tally.kernels.append(widening)
                moved_in = widening.written  # the sum reads the widened copy, not its source
            self.tally.kernels.append(Kernel(_name(func), moved_in, moved_out, flops, dtype))
        else:
            self.tally.host_ops[_name(func)] += 1
            self.tally.host_bytes += moved_in + moved_out
        return out

    def _copy(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A copy: within the device a kernel, to the host a wait, from the host a wait unless it is
        non-blocking from pinned memory."""
        if func is aten._to_copy.default:
            src, dst_device = args[0], kwargs.get("device") or args[0].device
        else:
            dst, src = args[0], args[1]
            dst_device = dst.device
        to_device = torch.device(dst_device).type == DEVICE
        if _on_device(src) and not to_device:  # device -> host
            self.wait("copy to host")
            if func is aten._to_copy.default:
                return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
            return args[0].zero_()
        out = func(*args, **kwargs)
        size = _distinct_bytes(src)
        if _on_device(src) and to_device:
            self.tally.kernels.append(Kernel(_name(func), size, _distinct_bytes(_tensors(out)[0])))
        elif to_device:  # host -> device
            self.tally.to_device_bytes += size
            if not (kwargs.get("non_blocking") or (len(args) > 2 and args[2])) or not src.is_pinned():
                self.wait("blocking copy to device")
        else:
            self.tally.host_ops[_name(func)] += 1
            self.tally.host_bytes += 2 * size
        return out


@contextmanager
def counting() -> Iterator[CostCounter]:
    """Count every operation inside the block; `torch.tensor(data, device=...)` with data from the host
    (which no dispatch mode sees) counts as a blocking copy to the device."""
    counter = CostCounter()
    original = torch.tensor

    @functools.wraps(original)
    def tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == DEVICE and not isinstance(data, torch.Tensor):
            counter.wait("torch.tensor(..., device=)")
        return original(data, *args, **kwargs)

    torch.tensor = tensor  # restored below
    try:
        with counter:
            yield counter
    finally:
        torch.tensor = original


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _on_device(t: torch.Tensor) -> bool:
    return t.device.type == DEVICE


# Beyond this, a GPU's L2 cache (50 MB on an H100, 60 on an H200) cannot keep an operand between uses.
CACHE_BYTES = 50 << 20


def _pointwise_read(source: torch.Tensor, result: torch.Tensor) -> int:
    """What an elementwise op reads of an input broadcast to its result: once where it stays in cache,
    else once for each result element (matmul_golden compares a block of outputs with one expected
    product of 134 MB: each output re-reads it from memory)."""
    distinct = _distinct_bytes(source)
    if distinct <= CACHE_BYTES or source.numel() >= result.numel():
        return distinct
    return result.numel() * source.element_size()


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor covers (an expanded dimension of stride 0 counts once)."""
    count = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return count * t.element_size()


def _widening_copy(func: Any, args: tuple[Any, ...], out: Any) -> Kernel | None:
    """The copy torch's sum makes of its input in the result's dtype before reducing (`aten::to` inside
    `aten::sum`, which a meta kernel does not show; on a GPU half and bfloat16 summed into float32 are
    spared): a bool mask summed into int64 writes and reads 8 bytes an element (sdcscan/checks/masks.py)."""
    if func.overloadpacket not in (aten.sum, aten.nansum) or not isinstance(out, torch.Tensor):
        return None
    source = args[0]
    if not sum_converts(source.dtype, out.dtype, torch.device(DEVICE)):
        return None
    count = source.numel()
    return Kernel("_to_copy", count * source.element_size(), count * out.element_size())


def _call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`func` on the meta device, or its functional op where torch has no Meta kernel for it."""
    functional = _FUNCTIONAL_OF.get(func)
    if functional is None:
        return func(*args, **kwargs)
    functional(*args, **{k: v for k, v in kwargs.items() if k != "out"})
    return kwargs["out"]


def _name(func: Any) -> str:
    return str(func.overloadpacket.__name__)


def _flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[float, str]:
    """(matrix FLOPs, operand dtype) of a product, (lookups, "lookups/Nbit") of a quantized EmbeddingBag;
    (0, "") for everything else (memory-bound)."""
    packet = func.overloadpacket
    if packet is aten._int_mm:
        (m, k), n = args[0].shape, args[1].shape[1]
        # a dimension 8 more than a multiple of 16: a third of the rate on an H200 (int8.GPU_ROW_MULTIPLE)
        return 2.0 * m * k * n, "int8" if n % 16 == 0 and k % 16 == 0 else "int8/unaligned"
    if packet in _BAG_BITS:
        return float(args[1].numel()), f"lookups/{_BAG_BITS[packet]}bit"
    if packet in (aten.mv, aten.addmv, aten.dot, aten.vdot):
        matrix = args[1] if packet is aten.addmv else args[0]
        return 2.0 * matrix.numel(), str(matrix.dtype).removeprefix("torch.")
    if packet in flop_registry:
        flops = flop_registry[packet](*args, **kwargs, out_val=out)  # the registry takes tensors' shapes
        # B of mm/bmm, of addmm/baddbmm after the bias, of _scaled_mm before its scales
        operand = args[1] if packet is aten._scaled_mm else _tensors(args)[-1]
        kind = str(operand.dtype).removeprefix("torch.")
        # fp32 products with TF32 allowed (matmul_golden's TF32 slot) run at the TF32 rate on a GPU
        return float(flops), f"{kind}/tf32" if operand.dtype == torch.float32 and tf32.allowed() else kind
    return 0.0, ""
