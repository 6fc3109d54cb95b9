"""Where this process sits in a distributed run, read from the environment torchrun's engine sets.

Torch-free: the CLI and the launcher read it before any work starts, so a missing or malformed
variable is a usage error (exit 2), never a hang in a rendezvous.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sdcscan.errors import UsageError

WIRE_KINDS = ("link", "update")  # faults on the wire: a bad hop into a rank; a rank's bad optimizer update
RANK_KINDS = ("hang", "crash")  # the rank's unit stops answering or dies (the unit faults of `faults`)
_INJECT = re.compile(r"^(?:rank)?(?P<rank>\d+):(?P<kind>[a-z]+)(?:@(?P<rate>[0-9.eE+-]+))?$")
BARRIER_S = 5.0  # how long monitored_barrier waits for a rank before it names it
_REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True, slots=True)
class WireFault:
    """An injected fault on rank `rank`: "link" corrupts what it receives from its ring predecessor;
    "update" corrupts its optimizer update in `train_dp`. `rate`: the chance per case."""

    kind: str
    rank: int
    rate: float = 1.0

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "kind": self.kind, "rate": self.rate}


@dataclass(frozen=True, slots=True)
class DistEnv:
    """This process's place in the world, as torch.distributed.elastic (or torchrun) set it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    run_id: str  # TORCHELASTIC_RUN_ID: the rendezvous id, the same on every rank
    restart: int  # TORCHELASTIC_RESTART_COUNT

    def to_dict(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "master": f"{self.master_addr}:{self.master_port}",
            "run_id": self.run_id,
        }


def in_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by torchrun's engine (it sets RANK and TORCHELASTIC_RUN_ID)."""
    env = os.environ if environ is None else environ
    return "RANK" in env and "TORCHELASTIC_RUN_ID" in env


def from_environment(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.

    Raises:
        UsageError: A variable is missing or malformed, or the process was not started by torchrun's
            engine (sdcscan needs the agent's store, which only it provides).
    """
    env = os.environ if environ is None else environ
    missing = [k for k in _REQUIRED if not env.get(k)]
    if missing:
        raise UsageError(
            f"--distributed needs {', '.join(missing)} in the environment: launch with "
            "`sdcscan run --distributed --standalone ...` or under torchrun"
        )
    if "TORCHELASTIC_RUN_ID" not in env or env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        raise UsageError(
            "--distributed needs torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True): launch with "
            "`sdcscan run --distributed ...` or `torchrun ... -m sdcscan run --distributed`"
        )
    rank = _int(env, "RANK", 0)
    world = _int(env, "WORLD_SIZE", 1)
    local_rank = _int(env, "LOCAL_RANK", 0)
    local_world = _int(env, "LOCAL_WORLD_SIZE", 1) if env.get("LOCAL_WORLD_SIZE") else world
    port = _int(env, "MASTER_PORT", 1)
    if rank >= world:
        raise UsageError(f"RANK={rank} is not below WORLD_SIZE={world}")
    if local_rank >= local_world:
        raise UsageError(f"LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world}")
    if port > 65535:
        raise UsageError(f"MASTER_PORT={port} is not a port")
    return DistEnv(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=env["MASTER_ADDR"],
        master_port=port,
        run_id=env.get("TORCHELASTIC_RUN_ID", "none"),
        restart=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) if env.get("TORCHELASTIC_RESTART_COUNT") else 0,
    )


def parse_rank_injection(text: str) -> tuple[int, str, float]:
    """`RANK:KIND[@RATE]` (RANK may be written rankN) -> (rank, kind, rate).

    Raises:
        UsageError: Not that form, an unknown kind, or a rate outside (0, 1].
    """
    m = _INJECT.match(text.strip())
    if m is None:
        raise UsageError(
            f"--inject {text!r}: a distributed run takes RANK:KIND[@RATE], e.g. 2:link or rank3:update"
        )
    kind = m["kind"]
    if kind not in WIRE_KINDS + RANK_KINDS:
        raise UsageError(
            f"--inject {text!r}: unknown kind {kind!r}; a distributed run injects "
            f"{', '.join(WIRE_KINDS + RANK_KINDS)}"
        )
    try:
        rate = float(m["rate"]) if m["rate"] else 1.0
    except ValueError:
        rate = -1.0
    if not 0.0 < rate <= 1.0:
        raise UsageError(f"--inject {text!r}: the rate must lie in (0, 1]")
    return int(m["rank"]), kind, rate


def _int(env: Mapping[str, str], key: str, minimum: int) -> int:
    text = env.get(key, "")
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{key}={text!r} is not an integer") from None
    if value < minimum:
        raise UsageError(f"{key}={value} must be at least {minimum}")
    return value


@dataclass(frozen=True, slots=True)
class RankSetup:
    """What a rank's worker needs to join the world and run distributed cases (plain data: it is pickled)."""

    env: DistEnv
    hostname: str
    faults: tuple[WireFault, ...] = ()
    timeout_s: float = 10.0  # every collective of a case, the agreement and the digest exchange
    join_timeout_s: float = 120.0  # the first join, which waits for the slowest rank's start-up
    exchange_every_s: float = 5.0  # live digest exchange at most this often (see worker's lockstep)
