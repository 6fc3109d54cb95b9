"""Fault injection specs and the bit-flip helper."""

from __future__ import annotations

import pytest
import torch

from sdcscan.errors import UsageError
from sdcscan.faults import (
    DATA_KINDS,
    FaultSpec,
    Injection,
    corrupt_,
    draws,
    flip_bit_,
    parse_inject,
    site_for,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu:1:bitflip", Injection("cpu:1", "bitflip", 1.0)),
        ("cpu:0:nan@0.3", Injection("cpu:0", "nan", 0.3)),
        ("cuda:2:hang", Injection("cuda:2", "hang", 1.0)),
        ("cpu:12:crash@1", Injection("cpu:12", "crash", 1.0)),
        ("cpu:1:tile8", Injection("cpu:1", "tile8", 1.0)),
        ("cuda:0:stuck1@0.5", Injection("cuda:0", "stuck1", 0.5)),
        ("cpu:2:wrong_rows", Injection("cpu:2", "wrong_rows", 1.0)),
    ],
)
def test_parse_inject_accepts_unit_kind_rate(text, expected):
    assert parse_inject(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "cpu1:bitflip",
        "cpu:1",
        "cpu:1:melt",
        "cpu:1:nan@0",
        "cpu:1:nan@1.5",
        "gpu:0:nan",
        "cpu:1:nan@x",
        "cpu:1:tile9",
        "cpu:1:8tile",
    ],
)
def test_parse_inject_rejects_malformed_specs(text):
    with pytest.raises(UsageError, match="--inject"):
        parse_inject(text)


@pytest.mark.parametrize(
    ("dtype", "bit", "before", "after"),
    [
        (torch.float32, 31, 1.0, -1.0),
        (torch.float32, 23, 1.0, 0.5),  # lowest exponent bit of 1.0 is set
        (torch.float64, 63, 2.0, -2.0),
        (torch.float16, 15, 3.0, -3.0),
        (torch.bfloat16, 7, 1.0, 0.5),
        (torch.int32, 31, 5, 5 - 2**31),
        (torch.int8, 7, 1, -127),
        (torch.uint8, 7, 1, 129),
    ],
)
def test_flip_bit_changes_exactly_that_bit(dtype, bit, before, after):
    t = torch.full((3,), before, dtype=dtype)
    flip_bit_(t, 1, bit)
    assert t[1].item() == after and t[0].item() == before and t[2].item() == before


def test_negative_bits_count_from_the_top():
    t = torch.ones(2, dtype=torch.float16)
    corrupt_(t, FaultSpec("bitflip", "output", seed=0, element=0, bit=-1))
    assert t[0].item() == -1.0


def test_corrupt_records_what_it_did_and_whether_a_value_changed():
    t = torch.zeros(4)
    info = corrupt_(t, FaultSpec("bitflip", "output", seed=1, element=2, bit=31))
    assert info == {"kind": "bitflip", "element": 2, "bit": 31, "value_changed": False}  # +0.0 -> -0.0
    info = corrupt_(t, FaultSpec("nan", "output", seed=1, element=0))
    assert torch.isnan(t[0]) and info["value_changed"]
    ints = torch.zeros(4, dtype=torch.int32)
    info = corrupt_(ints, FaultSpec("nan", "output", seed=1, element=1))
    assert ints[1].item() == -(2**31) and info["bit"] == 31


def test_draws_is_deterministic_and_follows_the_rate():
    inj = Injection("cpu:1", "bitflip", 0.3)
    hits = [draws(inj, seed) for seed in range(2000)]
    assert hits == [draws(inj, seed) for seed in range(2000)]
    assert 0.25 < sum(hits) / len(hits) < 0.35
    assert all(draws(Injection("cpu:1", "nan", 1.0), s) for s in range(50))


def test_every_hardware_fault_model_is_a_data_kind_and_wrong_rows_strikes_where_rows_are_fetched():
    """`--inject` drills every fault model; a wrong-row fetch goes to embbag's fetch site, not its output."""
    assert {"burst", "run32", "stride32", "tile8", "tile16", "stuck0", "stuck1", "wrong_rows"} <= set(
        DATA_KINDS
    )
    assert site_for("wrong_rows", ("output", "table", "fetch")) == "fetch"
    assert site_for("wrong_rows", ("output", "encoded")) == "output"
    assert site_for("tile8", ("output", "table", "fetch")) == "output"
