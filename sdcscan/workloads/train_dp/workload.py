"""`train_dp`: deterministic data-parallel training whose ranks compare hashes of their whole state.

Every rank of the world runs the same case at once (`WorkloadSpec.distributed`): the same small MLP,
initialised from the case seed, trains on its own shard (drawn from the case seed and its rank).
Gradients are all-reduced (sum, then divided by the world size, so every rank holds the same
averaged gradient) and every rank steps its own AdamW. Every `hash_every` steps, and at the case's
end, each rank hashes the raw bytes of its parameters and optimizer state (bf16 loses nothing) and
the hashes are all-gathered with the losses. `attribution.judge_state_hashes` reads them: one rank
apart is an update error on that rank, several ranks on one arc of the ring sharing wrong states are
a hop that corrupted blocks of the all-reduce, and a loss that differs from the one its ring
successor recomputed on a replica (same parameters, same shard) is a compute error on that rank,
which hashes cannot show because the all-reduce hands the wrong gradient to every rank.

Only blamed ranks report "mismatch" (exit 1 means "this unit miscomputes"); a pattern nobody can be
blamed for is reported ok with `detail["unattributed"]` for the caller to triage by subgroups.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from sdcscan.collectives.attribution import (
    CAUSE_COMPUTE,
    Attribution,
    HashVerdict,
    HopBlame,
    RankBlame,
    Unattributed,
    judge_state_hashes,
)
from sdcscan.collectives.world import World, gather_from_all
from sdcscan.outcomes import STATUS_MISMATCH, STATUS_OK, Case, Mismatch, Outcome, StatusWord
from sdcscan.workloads.base import Context, register
from sdcscan.workloads.train_dp.spec import DTYPES as DTYPE_NAMES
from sdcscan.workloads.train_dp.spec import SPEC
from sdcscan.workloads.workload_spec import WorkloadSpec

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
CLASSES = 10  # labels of the teacher task; the input and hidden width is the `width` parameter
OPTIMIZER_STATE = ("step", "exp_avg", "exp_avg_sq")  # AdamW's per-parameter state, hashed in this order
_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16}  # same-sized ints, for bit flips
_MANTISSA_TOP_BIT = {torch.float32: 22, torch.bfloat16: 6}  # a flip changes the value by 25-50%
_EXPONENT_LOW_BIT = {torch.float32: 23, torch.bfloat16: 7}  # a flip doubles or halves the value


def build_model(width: int, depth: int) -> nn.Sequential:
    """`depth` × (Linear → GELU) at `width`, then a Linear to CLASSES logits."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, CLASSES))
    return nn.Sequential(*layers)


def state_tensors(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    """Every parameter, then every parameter's optimizer state (OPTIMIZER_STATE), in a fixed order.

    A state entry that does not exist yet (before the first step) is left out on every rank alike.
    """
    named = list(model.named_parameters())
    found = [(name, p.detach()) for name, p in named]
    for name, p in named:
        state = optimizer.state.get(p, {})
        for key in OPTIMIZER_STATE:
            if key in state:
                value = state[key]
                found.append((f"{name}.{key}", value if torch.is_tensor(value) else torch.tensor(value)))
    return found


def hash_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 of each tensor's name, dtype, shape and raw bytes: bit-exact in every dtype (bf16 too)."""
    h = hashlib.sha256()
    for name, t in named:
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        h.update(raw.numpy().tobytes())
    return h.hexdigest()


def flip_bit_(flat: torch.Tensor, index: int, bit: int) -> None:
    """Flip bit `bit` of element `index` of a 1-d float32 or bfloat16 tensor, in place."""
    ints = flat.view(_INT_VIEW[flat.dtype])
    ints[index] ^= 1 << bit


def link_arcs(ring: Sequence[int], receiver: int) -> dict[int, tuple[int, ...]]:
    """The simulated bad hop into `receiver`: per source whose block it corrupts, who holds it wrong.

    The model (one ring all-reduce of the flat gradient, cut into one block per rank in ring order):
    after the reduce-scatter, rank s holds the summed block s; in the all-gather, block s travels
    s → next(s) → … → pred(s), stored and forwarded at every stop. A block corrupted on hop
    pred(R) → R is therefore wrong at R, next(R), …, pred(s): an arc of (s - R) mod n ranks.

    The hop corrupts the blocks it forwards, those of sources next(R) … pred(pred(R)). Their arcs
    nest, so R, next(R), … up to the rank before pred(pred(R)) each hold a different wrong state
    while pred(pred(R)) and pred(R) share the right one: one-rank stretches of one arc beside the
    largest group, which `judge_state_hashes` reads as hop pred(R) → R on a ring of four or more.
    On a ring of three R alone is wrong: an update error on R, with that hop as the alternative.
    The sender's own block, which leaves on this hop, is spared: corrupting it too would make every
    rank but the sender wrong, and the lone right rank would look like the faulty one. A single
    block's arc, as long as two ranks, splits a ring of four evenly, which names nobody. On a ring
    of two the sender's block is all that crosses the hop, so it is the one corrupted (two ranks
    disagree: nobody is blamed).
    """
    n = len(ring)
    if n < 2:
        return {}
    at = ring.index(receiver)
    arcs = {ring[(at + k) % n]: tuple(ring[(at + j) % n] for j in range(k)) for k in range(1, n - 1)}
    return arcs or {ring[at - 1]: (receiver,)}


@dataclass(frozen=True, slots=True)
class RankReport:
    """What one rank sends at an exchange: its state hash and its losses since the last exchange."""

    hash: str
    losses: tuple[float, ...]  # its loss on its own shard, per step of the window
    replicas: tuple[float, ...]  # its recomputation of its ring predecessor's loss, per step

    def to_wire(self) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
        return (self.hash, self.losses, self.replicas)


def judge_exchange(reports: Mapping[int, RankReport], ring: Sequence[int]) -> tuple[HashVerdict, int]:
    """Judge one exchange; returns the verdict and the step of the window whose losses it compared.

    A loss is trusted against its replica only while both ranks hold the same parameters. The window's
    first step ran on the state the previous exchange found equal everywhere, so its losses always
    count. When the hashes agree now, the state stayed equal all window long and the first step whose
    loss differs from its replica (else the last step) is judged; when they disagree, later losses may
    differ only because the states do, so the first step's are judged.
    """
    order = list(ring)
    successor = {r: order[(i + 1) % len(order)] for i, r in enumerate(order)}
    steps = len(reports[order[0]].losses)
    losses = [{r: reports[r].losses[i] for r in order} for i in range(steps)]
    expected = [{r: reports[successor[r]].replicas[i] for r in order} for i in range(steps)]
    hashes = {r: reports[r].hash for r in order}
    at = 0
    if len(set(hashes.values())) == 1:
        differs = [i for i in range(steps) if any(_differ(losses[i][r], expected[i][r]) for r in order)]
        at = differs[0] if differs else steps - 1
    verdict = judge_state_hashes(hashes, ring=order, losses=losses[at], expected_losses=expected[at])
    return verdict, at


def case_outcome(rank: int, verdict: HashVerdict, *, judged: int, digest: str, steps_run: int) -> Outcome:
    """This rank's outcome: "mismatch" only if a finding accuses it, whatever the others hold.

    An Unattributed pattern accuses nobody: the outcome stays ok and `detail["unattributed"]` tells
    the caller to triage by subgroups. `judged` is the step whose losses were compared, `steps_run`
    how many steps ran (the last exchange came after step `steps_run - 1`).
    """
    mismatches = [
        _mismatch(f, judged, steps_run - 1, digest) for f in verdict.findings if rank in _accused(f)
    ]
    detail: dict[str, object] = {"steps": steps_run, "verdict": verdict.to_dict()}
    if not verdict.ok:
        detail["finding"] = verdict.describe()
    if any(isinstance(f, Unattributed) for f in verdict.findings):
        detail["unattributed"] = True
    status: StatusWord = STATUS_MISMATCH if mismatches else STATUS_OK
    detail["state_hash"] = digest
    return Outcome(
        status=status,
        digest=_case_digest(verdict, digest, judged, steps_run),
        mismatches=mismatches,
        ops_unit="flop",
        detail=detail,
    )


def _case_digest(verdict: HashVerdict, state_hash: str, judged: int, steps_run: int) -> str:
    """The case's digest, the same on every rank: the common state's hash when all ranks agree (so runs
    and hosts compare), else a hash of the verdict every rank reached. A rank's own wrong state is
    judged here, by the hash exchange; the cross-rank digest consensus must not judge it again (with
    two wrong groups it could not decide, and would call the good ranks undecided)."""
    if verdict.ok:
        return state_hash
    seen = json.dumps({"verdict": verdict.to_dict(), "judged": judged, "steps": steps_run}, sort_keys=True)
    return hashlib.sha256(seen.encode()).hexdigest()


@register
class TrainDp:
    name: ClassVar[str] = "train_dp"
    spec: ClassVar[WorkloadSpec] = SPEC

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.p = {**self.spec.defaults, **params}
        if self.p["dtype"] not in DTYPES:
            raise ValueError(f"train_dp: dtype must be one of {', '.join(DTYPES)}")
        self.model: nn.Sequential | None = None

    def prepare(self, ctx: Context) -> None:
        self.model = build_model(self.p["width"], self.p["depth"]).to(_device(ctx), DTYPES[self.p["dtype"]])
        # The first optimizer torch builds imports its compiler stack (seconds): pay that here, not
        # inside the first case, where every rank waits for the slowest in lockstep.
        torch.optim.AdamW(self.model.parameters(), foreach=False, fused=False)

    def run(self, ctx: Context, case: Case) -> Outcome:
        p, model, world = self.p, self.model, ctx.world
        assert model is not None, "prepare() was not called"
        if world is None:
            raise ValueError("train_dp runs only in a distributed run (sdcscan run --distributed)")
        ring = list(world.ring)
        pred = ring[ring.index(world.rank) - 1]
        steps, every = p["steps"], p["hash_every"]
        with ctx.phase("setup"):
            _init_weights(model, ctx.generator(case.seed))
            own = _shard(ctx, p, case.seed, world.rank)
            other = own if pred == world.rank else _shard(ctx, p, case.seed, pred)
            opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], foreach=False, fused=False)
            plan = _FaultPlan.draw(world, case.seed, steps, len(list(model.parameters())))
        losses: list[torch.Tensor] = []
        replicas: list[torch.Tensor] = []
        window = 0  # first step since the last exchange
        verdict: HashVerdict | None = None
        judged, digest, step = 0, "", 0
        for step in range(steps):
            with ctx.phase("compute"):
                loss, replica = self._step(ctx, world, model, opt, own, other, step, plan)
                losses.append(loss)
                replicas.append(replica)
            if (step + 1) % every and step != steps - 1:
                continue
            with ctx.phase("check"):
                digest = hash_tensors(state_tensors(model, opt))
                mine = RankReport(digest, _floats(losses[window:]), _floats(replicas[window:]))
                gathered = gather_from_all(world, mine.to_wire())
                reports = {r: RankReport(h, tuple(ls), tuple(rs)) for r, (h, ls, rs) in enumerate(gathered)}
                verdict, at = judge_exchange(reports, ring)
                judged, window = window + at, step + 1
            if not verdict.ok:
                break
        assert verdict is not None, "steps must be at least 1"
        n_params = sum(q.numel() for q in model.parameters())
        outcome = case_outcome(world.rank, verdict, judged=judged, digest=digest, steps_run=step + 1)
        # forward 2 and backward 4 flops per weight and sample, plus the replica's forward 2
        outcome.ops = 8.0 * n_params * p["batch"] * (step + 1)
        outcome.detail.update(losses=list(_floats(losses)), dtype=p["dtype"])
        return outcome

    def _step(
        self,
        ctx: Context,
        world: World,
        model: nn.Sequential,
        opt: torch.optim.Optimizer,
        own: tuple[torch.Tensor, torch.Tensor],
        other: tuple[torch.Tensor, torch.Tensor],
        step: int,
        plan: _FaultPlan,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One data-parallel step; returns this rank's loss and its replica of its predecessor's."""
        opt.zero_grad(set_to_none=True)
        loss = _loss(model, own, step)
        loss.backward()
        with torch.no_grad():
            replica = _loss(model, other, step)
        params = list(model.parameters())
        grads = [q.grad for q in params]
        assert all(g is not None for g in grads), "every parameter takes part in the loss"
        flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=world.data)
        flat.div_(world.size)
        if plan.link_step == step:
            plan.corrupt_link_(ctx, world.rank, flat)
        offset = 0
        for q in params:
            q.grad = flat[offset : offset + q.numel()].view_as(q)
            offset += q.numel()
        opt.step()
        if plan.update_step == step:
            with torch.no_grad():
                target = params[plan.update_param].data
                ctx.fault("update", target)  # a local fault armed by the runner, if any
                if plan.update_rank == world.rank:
                    plan.corrupt_update_(ctx, target)
        return loss.detach(), replica


@dataclass(frozen=True, slots=True)
class _FaultPlan:
    """Where this case's injected wire faults strike: drawn from the case seed, the same on every rank."""

    seed: int
    ring: tuple[int, ...]
    link_step: int | None = None
    link_receiver: int = -1
    update_step: int | None = None
    update_rank: int = -1
    update_param: int = 0

    @classmethod
    def draw(cls, world: World, seed: int, steps: int, n_params: int) -> _FaultPlan:
        link, update = world.fault("link"), world.fault("update")
        plan: dict[str, Any] = {}
        if link is not None and random.Random(f"{seed}:link").random() < link.rate:
            plan.update(
                link_step=random.Random(f"{seed}:link:step").randrange(steps), link_receiver=link.rank
            )
        pick = random.Random(f"{seed}:update:where")  # also where a fault armed by the runner strikes
        plan.update(update_step=pick.randrange(steps), update_param=pick.randrange(n_params))
        if update is not None and random.Random(f"{seed}:update").random() < update.rate:
            plan.update(update_rank=update.rank)
        return cls(seed=seed, ring=tuple(world.ring), **plan)

    def corrupt_link_(self, ctx: Context, rank: int, flat: torch.Tensor) -> None:
        """Flip one bit of each block the bad hop corrupts, on the ranks that hold it wrong (link_arcs).

        The bit: the exponent's lowest bit of the block's largest element (identical on every rank),
        which doubles or halves it: never rounded away by the optimizer, so the states always differ.
        """
        blocks = torch.arange(flat.numel()).tensor_split(len(self.ring))
        hit = []
        for source, holders in link_arcs(self.ring, self.link_receiver).items():
            block = blocks[self.ring.index(source)]
            if rank not in holders or block.numel() == 0:
                continue
            index = int(block[0]) + int(flat[block].abs().float().argmax())
            flip_bit_(flat, index, _EXPONENT_LOW_BIT[flat.dtype])
            hit.append(source)
        if hit:
            sender = self.ring[self.ring.index(self.link_receiver) - 1]
            ctx.injected = {"kind": "link", "hop": [sender, self.link_receiver], "sources": hit}
            ctx.injected["step"] = self.link_step

    def corrupt_update_(self, ctx: Context, target: torch.Tensor) -> None:
        """Flip the top mantissa bit of one element of one parameter, right after the optimizer step."""
        index = random.Random(f"{self.seed}:update:element").randrange(target.numel())
        flip_bit_(target.view(-1), index, _MANTISSA_TOP_BIT[target.dtype])
        ctx.injected = {"kind": "update", "rank": self.update_rank, "step": self.update_step, "index": index}


def _device(ctx: Context) -> torch.device:
    """Where the collectives' buffers live in a distributed run, else the unit's device."""
    return ctx.world.device if ctx.world is not None else ctx.device


def _init_weights(model: nn.Sequential, g: torch.Generator) -> None:
    """Every weight and bias from the case seed (the same on every rank), uniform in ±1/sqrt(fan-in)."""
    with torch.no_grad():
        for module in model:
            if isinstance(module, nn.Linear):
                bound = module.in_features**-0.5
                for t in (module.weight, module.bias):
                    t.copy_(torch.rand(t.shape, generator=g) * 2 * bound - bound)


def _shard(ctx: Context, p: Mapping[str, Any], seed: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s inputs and labels for every step: its own data, labelled by the case's teacher."""
    teacher = torch.randn(p["width"], CLASSES, generator=ctx.generator(seed))
    mix = int.from_bytes(hashlib.sha256(f"{seed}:shard:{rank}".encode()).digest()[:8], "little")
    x = torch.randn(p["steps"], p["batch"], p["width"], generator=ctx.generator(mix))
    y = (x @ teacher).argmax(-1)  # a learnable task, so the losses move and every step matters
    device = _device(ctx)
    return x.to(device, DTYPES[p["dtype"]]), y.to(device)


def _loss(model: nn.Module, shard: tuple[torch.Tensor, torch.Tensor], step: int) -> torch.Tensor:
    x, y = shard
    return nn.functional.cross_entropy(model(x[step]).float(), y[step])


def _floats(values: Sequence[torch.Tensor]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _differ(a: float, b: float) -> bool:
    """Not bit-for-bit the same loss (two NaNs count as the same, as in judge_state_hashes)."""
    return not (a == b or (a != a and b != b))


def _mismatch(finding: Attribution, judged: int, exchanged: int, digest: str) -> Mismatch:
    """The finding that accuses this rank: a loss its replica disagrees with, or its state's hash."""
    if isinstance(finding, RankBlame) and finding.cause == CAUSE_COMPUTE:
        where, expected, actual = judged, repr(finding.expected_loss), repr(finding.loss)
        return Mismatch("replica_loss", f"step {where}: {finding.describe()}", expected, actual)
    return Mismatch("state_hash", f"step {exchanged}: {finding.describe()}", "the majority's state", digest)


def _accused(finding: Attribution) -> tuple[int, ...]:
    if isinstance(finding, RankBlame):
        return (finding.rank,)
    return (finding.hop[1],) if isinstance(finding, HopBlame) else ()
