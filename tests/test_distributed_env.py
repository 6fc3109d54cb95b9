"""A distributed run reads its place in the world from torchrun's variables; a bad one is exit 2, before any work."""

from __future__ import annotations

import pytest

from sdcscan.collectives.env import from_environment, in_torchrun, parse_rank_injection
from sdcscan.errors import UsageError
from sdcscan.launch.launcher import LaunchOptions, combine

GOOD = {
    "RANK": "3",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "job42",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RESTART_COUNT": "0",
}


def test_reads_torchrun_variables() -> None:
    env = from_environment(GOOD)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 8, 1, 4)
    assert (env.master_addr, env.master_port, env.run_id, env.restart) == ("node0", 29400, "job42", 0)
    assert in_torchrun(GOOD) and not in_torchrun({})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"RANK": None}, "RANK"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT"),
        ({"MASTER_PORT": "70000"}, "not a port"),
        ({"RANK": "8"}, "not below WORLD_SIZE"),
        ({"LOCAL_RANK": "4"}, "not below LOCAL_WORLD_SIZE"),
        ({"WORLD_SIZE": "0"}, "at least 1"),
        ({"TORCHELASTIC_USE_AGENT_STORE": None}, "agent store"),
    ],
)
def test_refuses_a_broken_environment(change: dict[str, str | None], words: str) -> None:
    env = {**GOOD, **change}
    with pytest.raises(UsageError, match=words):
        from_environment({k: v for k, v in env.items() if v is not None})


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("2:link", (2, "link", 1.0)), ("rank3:update", (3, "update", 1.0)), ("0:hang@0.5", (0, "hang", 0.5))],
)
def test_parses_rank_injections(text: str, parsed: tuple[int, str, float]) -> None:
    assert parse_rank_injection(text) == parsed


@pytest.mark.parametrize("text", ["cpu:1:bitflip", "2:bitflip", "2:link@0", "2:link@1.5", "x:link", "2"])
def test_refuses_bad_rank_injections(text: str) -> None:
    with pytest.raises(UsageError):
        parse_rank_injection(text)


@pytest.mark.parametrize(
    ("codes", "node"),
    [
        ([0, 0, 0], 0),
        ([0, 3, 0], 3),
        ([1, 0], 1),
        ([1, 3], 1),  # as for one host's units: a fail outranks "could not judge" (the report lists both)
        ([2, 3], 2),
        ([1, 143], 143),  # a stop by signal says so
        ([0, "odd"], 3),  # not a code at all: the rank could not be judged
    ],
)
def test_node_code_from_its_ranks(codes: list[object], node: int) -> None:
    assert combine(codes) == node


@pytest.mark.parametrize(
    ("where", "words"),
    [
        (LaunchOptions(4), "--standalone"),
        (LaunchOptions(4, standalone=True, nnodes=2), "alone"),
        (LaunchOptions(4, rdzv_endpoint="node0", rdzv_id="j"), "HOST:PORT"),
        (LaunchOptions(4, rdzv_endpoint="node0:99999", rdzv_id="j"), "HOST:PORT"),
        (LaunchOptions(4, rdzv_endpoint="node0:29400"), "--rdzv-id"),
    ],
)
def test_refuses_bad_launch_options(where: LaunchOptions, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        where.check()


def test_accepts_good_launch_options() -> None:
    LaunchOptions(4, standalone=True).check()
    LaunchOptions(8, nnodes=2, rdzv_endpoint="node0:29400", rdzv_id="job42").check()
    assert LaunchOptions(8, nnodes=2).world_size == 16
