"""`train`: a deterministic tiny training loop whose digest covers every loss, the weights and AdamW's state.

A wrong bit in forward, backward or the optimizer almost always changes the digest (docs/abft.md §4.4: a
flip of bit 0 of one weight changed the final digest), but not always: rounding can absorb a flip of a
low mantissa bit late in the loop, leaving the final state bit-identical (independent checks saw this
for 18% of lowest-bit flips at the last step, and for 22 of 100 in AdamW's exp_avg: issue 44, on an AVX2
EPYC). That is arithmetic, not a gap in the digest. Units
of a cohort (one thread each, same software) must agree bit for bit, so disagreement is evidence.

`autocast` (bfloat16 or float16) runs the forward pass and the loss under torch.autocast, so the matmuls
keep a GPU's matrix units busy, while the weights and AdamW's state stay float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from sdcscan.checks.digest import Fingerprint
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.readout import float_of, read_once
from sdcscan.workloads.train.spec import AUTOCAST, DTYPES, SPEC
from sdcscan.workloads.workload_spec import WorkloadSpec

_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
_AUTOCAST: dict[str, torch.dtype | None] = {
    name: None if name == "none" else getattr(torch, name) for name in AUTOCAST
}


def build_model(
    inputs: int, hidden: int, classes: int, device: torch.device | str | None = None
) -> nn.Sequential:
    """Linear → GELU → Linear → LayerNorm → GELU → Linear: small, but with every common op class.

    Built on `device` (every case sets its weights anew: nothing is drawn on the host and copied)."""
    return nn.Sequential(
        nn.Linear(inputs, hidden, device=device),
        nn.GELU(),
        nn.Linear(hidden, hidden, device=device),
        nn.LayerNorm(hidden, device=device),
        nn.GELU(),
        nn.Linear(hidden, classes, device=device),
    )


@register
class Train:
    name: ClassVar[str] = "train"
    spec: ClassVar[WorkloadSpec] = SPEC

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = {**self.spec.defaults, **params}
        if self.p["dtype"] not in _DTYPES:
            raise ValueError(f"train: dtype must be one of {', '.join(_DTYPES)}")
        if self.p["autocast"] not in _AUTOCAST:
            raise ValueError(f"train: autocast must be one of {', '.join(_AUTOCAST)}")
        broken = self.spec.rules_problem(self.p)  # autocast with a dtype other than float32
        if broken:
            raise ValueError(f"train: {broken[0]} {broken[1]}")
        self.model: nn.Sequential | None = None

    def prepare(self, ctx: Context) -> None:
        p = self.p
        model = build_model(p["inputs"], p["hidden"], p["classes"], ctx.device)
        self.model = model.to(ctx.device, _DTYPES[p["dtype"]])
        # The first optimizer a process builds imports torch._dynamo (900 modules, 0.9 s on an EPYC
        # core), and its first zero_grad one module more: both here, so they are start-up, not the
        # first case's time and rate. Nothing has a gradient yet, so zero_grad changes nothing.
        torch.optim.AdamW(model.parameters(), lr=p["lr"]).zero_grad(set_to_none=True)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p, model = self.p, self.model
        assert model is not None, "prepare() was not called"
        dtype, steps = _DTYPES[p["dtype"]], p["steps"]
        with ctx.phase("setup"):
            x, y = self._init_case(ctx, case, model, dtype)
            opt = torch.optim.AdamW(model.parameters(), lr=p["lr"])
        losses = torch.empty(steps, dtype=torch.float32, device=ctx.device)
        with ctx.phase("compute"):
            for step in range(steps):
                if step == steps // 2:
                    with torch.no_grad():
                        ctx.fault("weight", _hidden_weight(model))
                opt.zero_grad(set_to_none=True)
                with _autocast(ctx.device, p["autocast"]):
                    loss = nn.functional.cross_entropy(model(x[step]).float(), y[step])
                loss.backward()  # outside autocast: backward runs each op in its forward's dtype
                opt.step()
                losses[step] = loss.detach()
        with ctx.phase("check"):
            # Everything a verdict needs stays on the device and is read once: finiteness flags, the
            # fingerprint of the losses, the weights and AdamW's state, and the last loss.
            nonfinite = _nonfinite_flags(losses, model)
            digest = Fingerprint().tensor(losses)
            for t in model.parameters():
                digest.tensor(t)
            for state in opt.state.values():
                for key, v in state.items():
                    if torch.is_tensor(v) and v.device == ctx.device:
                        digest.tensor(v)
                    else:  # AdamW's step count, a host scalar
                        digest.bytes(f"{key}={float(v)!r}".encode())
            flags, sums, words = read_once([nonfinite, digest.sums(), losses])
        values = [float_of(w) for w in words]
        mismatches = _nonfinite(flags, values, model)
        n_params = sum(t.numel() for t in model.parameters())
        return Outcome(
            status=STATUS_MISMATCH if mismatches else STATUS_OK,
            digest=digest.hexdigest_of(sums),
            mismatches=mismatches,
            ops=6.0 * n_params * p["batch"] * steps,  # forward 2, backward 4 flops per weight and sample
            ops_unit="flop",
            detail={"final_loss": values[-1]},
        )

    def _init_case(
        self, ctx: Context, case: Case, model: nn.Sequential, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Weights, data and labels from the case seed only (never the global RNG)."""
        p, g = self.p, case_generator(ctx, case.seed)

        def uniform(shape: torch.Size, bound: float) -> torch.Tensor:
            return torch.rand(shape, generator=g, device=ctx.device) * 2 * bound - bound

        with torch.no_grad():
            for module in model:
                if isinstance(module, nn.Linear):
                    bound = module.in_features**-0.5
                    module.weight.copy_(uniform(module.weight.shape, bound))
                    module.bias.copy_(uniform(module.bias.shape, bound))
                elif isinstance(module, nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()
        x = torch.randn(p["steps"], p["batch"], p["inputs"], generator=g, device=ctx.device)
        teacher = torch.randn(p["inputs"], p["classes"], generator=g, device=ctx.device)
        y = (x @ teacher).argmax(-1)  # a learnable task, so losses move and every step matters
        return x.to(ctx.device, dtype), y.to(ctx.device)


def case_generator(ctx: Context, seed: int) -> torch.Generator | None:
    """The generator a case draws its weights and data from: `ctx.generator(seed)` on the CPU, a
    generator with the same seed on the case's device anywhere else.

    Why: drawing on the host (and copying to the GPU) cost ~0.7 s per case at GPU shapes (hidden 8192,
    batch 32768), time the GPU sat idle. The cost: a device's generator draws other numbers than the
    CPU's, possibly other ones again on another GPU model, so a GPU case trains on other data than a
    CPU case. That is harmless: digests are compared only within a cohort (one device model, one
    software stack).
    """
    cpu = ctx.generator(seed)
    if ctx.device.type == "cpu":
        return cpu
    if ctx.device.type == "meta":  # the cost model's device (sdcscan.costmodel): no data, no generator
        return None
    return torch.Generator(device=ctx.device).manual_seed(cpu.initial_seed())  # ctx.generator's seed


def _autocast(device: torch.device, autocast: str) -> contextlib.AbstractContextManager[object]:
    """torch.autocast at the `autocast` parameter's dtype; nothing at all for "none" (digests unchanged)."""
    dtype = _AUTOCAST[autocast]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _hidden_weight(model: nn.Sequential) -> torch.Tensor:
    """The (hidden, hidden) weight of the second Linear: the fault site `weight`."""
    layer = model[2]
    assert isinstance(layer, nn.Linear), "build_model changed: the fault site moved"
    return layer.weight.data


def _nonfinite_flags(losses: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """(steps + parameters,) bool on the device: a loss, then a parameter, that is not finite."""
    params = [~torch.isfinite(t).all() for t in model.parameters()]
    return torch.cat([~torch.isfinite(losses), torch.stack(params)])


def _nonfinite(flags: list[int], losses: list[float], model: nn.Module) -> list[Mismatch]:
    """NaN or Inf anywhere is an invariant failure: this training is finite by construction. `flags`:
    `_nonfinite_flags` and the losses as read on the host."""
    found = []
    names = [name for name, _ in model.named_parameters()]
    steps = len(losses)
    bad_steps = [step for step in range(steps) if flags[step]]
    if bad_steps:
        found.append(Mismatch("finite", f"loss at step {bad_steps[0]}", "finite", str(losses[bad_steps[0]])))
    bad_params = [name for name, flag in zip(names, flags[steps:], strict=True) if flag]
    if bad_params:
        found.append(Mismatch("finite", f"parameter {bad_params[0]}", "finite", "NaN/Inf"))
    return found
