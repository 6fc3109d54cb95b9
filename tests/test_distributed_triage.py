"""Reductive triage with fake `reproduces` functions: a bad node, a bad link, a flaky node, limits."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdcscan.collectives.triage import (
    STOP_BUDGET,
    STOP_ISOLATED,
    STOP_MIN_SIZE,
    STOP_NO_RESULT,
    STOP_NOT_REPRODUCED,
    Node,
    reductive_triage,
)
from sdcscan.errors import UsageError


def world(n_nodes, ranks_per_node):
    """node0 … node{n-1}, ranks numbered in node order."""
    return [
        Node(f"node{i}", tuple(range(i * ranks_per_node, (i + 1) * ranks_per_node))) for i in range(n_nodes)
    ]


def needs(*names):
    """A fault that reproduces on any subset holding all of `names` (one node: a bad node; two: a bad link)."""
    return lambda nodes: set(names) <= {node.name for node in nodes}


def assert_trials_match(result, fault):
    """Every recorded trial says what the fake said for that subset, and the suspects reproduced."""
    by_name = {f"node{i}": Node(f"node{i}", ()) for i in range(64)}
    for trial in result.trials:
        assert trial.result == fault(tuple(by_name[n] for n in trial.nodes))
    assert any(t.result and t.nodes == result.suspects for t in result.trials)


@pytest.mark.parametrize("n_nodes", range(1, 10))
@pytest.mark.parametrize("ranks_per_node", [2, 4])
def test_a_bad_node_is_isolated_alone(n_nodes, ranks_per_node):
    """Whatever its place among 1..9 nodes, a bad node is found alone, in about 2·log2(n) trials."""
    for bad in range(n_nodes):
        fault = needs(f"node{bad}")
        result = reductive_triage(world(n_nodes, ranks_per_node), fault, budget=50)
        assert (result.suspects, result.stop, result.sides) == ((f"node{bad}",), STOP_ISOLATED, None)
        assert len(result.trials) <= 1 + 2 * max(1, (n_nodes - 1).bit_length())
        assert_trials_match(result, fault)
        assert result.describe().startswith(f"node node{bad} alone reproduces the failure")


def test_with_one_rank_per_node_triage_stops_at_a_pair_for_the_collective():
    """min_size 2 and one rank per node: the bad node comes with one peer, and the stop says why."""
    result = reductive_triage(world(8, 1), needs("node5"), budget=50)
    assert "node5" in result.suspects
    assert (len(result.suspects), result.stop) == (2, STOP_MIN_SIZE)
    assert "too few ranks" in result.describe()


def test_when_a_half_is_too_small_sets_with_one_node_left_out_are_tried():
    """Three one-rank nodes, min_size 2: halves would have one rank, so the planner drops one node at a time."""
    result = reductive_triage(world(3, 1), needs("node2"), budget=50)
    assert (result.suspects, result.stop) == (("node1", "node2"), STOP_MIN_SIZE)
    assert [t.nodes for t in result.trials] == [("node0", "node1", "node2"), ("node1", "node2")]
    every = reductive_triage(world(3, 1), lambda nodes: len(nodes) == 3, budget=50)
    assert (every.suspects, every.stop) == (("node0", "node1", "node2"), STOP_ISOLATED)


@pytest.mark.parametrize("pair", [(a, b) for a in range(8) for b in range(a + 1, 8)])
def test_a_bad_link_is_narrowed_to_its_two_nodes(pair):
    """A fault that needs two nodes together: neither half reproduces alone, each side narrows to one node."""
    a, b = (f"node{i}" for i in pair)
    fault = needs(a, b)
    result = reductive_triage(world(8, 2), fault, budget=50)
    assert (result.suspects, result.sides, result.stop) == ((a, b), ((a,), (b,)), STOP_ISOLATED)
    assert_trials_match(result, fault)
    assert f"{a} together with {b}" in result.describe()


def flaky(name, seed):
    """A node that reproduces the failure half of the time, from a seeded RNG."""
    rng = random.Random(seed)
    return lambda nodes: name in {node.name for node in nodes} and rng.random() < 0.5


def test_a_flaky_node_is_always_among_the_suspects_and_repeats_isolate_it():
    """50 % reproduction: the suspects always hold it, innocents join with one attempt, repeats narrow to it."""
    exact = {1: 0, 6: 0}
    said = set()
    for seed in range(40):
        for attempts in exact:
            fault = flaky("node3", seed)
            result = reductive_triage(
                world(8, 2), fault, budget=60, attempts=attempts, known_to_reproduce=True
            )
            assert "node3" in result.suspects
            assert all("node3" in t.nodes for t in result.trials if t.result)
            exact[attempts] += result.suspects == ("node3",)
            if attempts == 1 and result.sides is not None:
                said.add(result.describe())
    assert exact[6] > exact[1]
    assert exact[6] >= 35
    # With one attempt a missed reproduction reads as "needs both sides", and the sentence says what to do.
    assert said
    assert all("raise attempts to tell" in sentence for sentence in said)


def test_an_exhausted_budget_stops_with_the_smallest_set_seen_to_reproduce():
    """Budget 2: the whole world and one half; the stop says the budget ran out."""
    result = reductive_triage(world(8, 2), needs("node1"), budget=2)
    assert (result.stop, len(result.trials)) == (STOP_BUDGET, 2)
    assert result.suspects == ("node0", "node1", "node2", "node3")
    assert "budget ran out" in result.describe()


def test_attempts_count_against_the_budget():
    """Three attempts per subset, budget 4: the whole world once (it reproduces), then three tries of a half."""
    result = reductive_triage(world(4, 2), needs("node3"), budget=4, attempts=3)
    assert [t.nodes for t in result.trials] == [("node0", "node1", "node2", "node3")] + [
        ("node0", "node1")
    ] * 3
    assert result.stop == STOP_BUDGET


def test_a_trial_that_cannot_run_stops_the_search_there():
    """A subset of two nodes times out (None): the search stops, the last trial is that None."""

    def times_out(nodes):
        return None if len(nodes) == 2 else "node6" in {n.name for n in nodes}

    result = reductive_triage(world(8, 2), times_out, budget=50)
    assert (result.stop, result.trials[-1].result) == (STOP_NO_RESULT, None)
    assert result.suspects == ("node4", "node5", "node6", "node7")
    assert "could not run" in result.describe()
    first = reductive_triage(world(8, 2), lambda nodes: None, budget=50)
    assert (first.suspects, first.stop, len(first.trials)) == ((), STOP_NO_RESULT, 1)


def test_a_failure_the_whole_world_does_not_reproduce_is_not_narrowed():
    """The whole world passes every attempt: no suspects, and the description says it may be transient."""
    result = reductive_triage(world(4, 2), lambda nodes: False, budget=10, attempts=3)
    assert (result.suspects, result.stop, len(result.trials)) == ((), STOP_NOT_REPRODUCED, 3)
    assert "may be transient" in result.describe()


def test_a_known_reproduction_skips_the_trial_on_the_whole_world():
    """known_to_reproduce: the first trial is already a half."""
    result = reductive_triage(world(4, 2), needs("node2"), budget=10, known_to_reproduce=True)
    assert result.trials[0].nodes == ("node0", "node1")
    assert result.suspects == ("node2",)


def test_the_result_serialises_to_json():
    """to_dict is plain JSON: suspects, stop, sides and every trial."""
    doc = json.loads(json.dumps(reductive_triage(world(4, 2), needs("node0", "node3"), budget=20).to_dict()))
    assert (doc["suspects"], doc["sides"], doc["stop"]) == (
        ["node0", "node3"],
        [["node0"], ["node3"]],
        "isolated",
    )
    assert doc["trials"][0] == {"nodes": ["node0", "node1", "node2", "node3"], "result": True}


@pytest.mark.parametrize(
    ("nodes", "kwargs"),
    [
        ([], {}),
        ([Node("a", (0,)), Node("a", (1,))], {}),
        ([Node("a", ()), Node("b", (1,))], {}),
        ([Node("a", (0,)), Node("b", (0,))], {}),
        (world(2, 1), {"budget": 0}),
        (world(2, 1), {"attempts": 0}),
        (world(2, 1), {"min_size": 0}),
        (world(2, 1), {"min_size": 3}),
    ],
)
def test_bad_arguments_are_usage_errors(nodes, kwargs):
    """No nodes, a repeated name or rank, a node without ranks, limits below 1, too few ranks: UsageError."""
    with pytest.raises(UsageError):
        reductive_triage(nodes, needs("a"), **{"budget": 10, **kwargs})


@st.composite
def layouts(draw):
    """1..10 nodes with 1..4 ranks each."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=10))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [
        Node(f"node{i}", tuple(range(s, s + k))) for i, (s, k) in enumerate(zip(starts, sizes, strict=True))
    ]


@given(layouts(), st.data(), st.integers(1, 3))
def test_any_layout_isolates_a_bad_node_its_size_allows(nodes, data, min_size):
    """Any layout and min_size: the bad node is a suspect, and alone whenever it has min_size ranks itself."""
    if sum(len(n.ranks) for n in nodes) < min_size:
        return
    bad = data.draw(st.sampled_from(nodes))
    result = reductive_triage(nodes, needs(bad.name), budget=200, min_size=min_size)
    assert bad.name in result.suspects
    if len(bad.ranks) >= min_size:
        assert result.suspects == (bad.name,)


@given(layouts(), st.data())
def test_any_layout_narrows_a_bad_link_to_its_two_nodes(nodes, data):
    """Any layout of two or more nodes: a fault needing two given nodes ends at exactly those two."""
    if len(nodes) < 2:
        return
    a, b = data.draw(st.lists(st.sampled_from(nodes), min_size=2, max_size=2, unique=True))
    result = reductive_triage(nodes, needs(a.name, b.name), budget=200, min_size=1)
    assert set(result.suspects) == {a.name, b.name}
