"""Attribution of wrong collective results: ring hop blame, rank blame, send/recv hops, train_dp hashes.

Wrong-pair sets come from a small simulation of a ring all_gather written here, apart from the
code under test: a block is walked hop by hop from its source and marked wrong from the corrupting
hop on.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdcscan.collectives.attribution import (
    CAUSE_COMPUTE,
    CAUSE_COPY,
    CAUSE_UPDATE,
    Clean,
    HopBlame,
    RankBlame,
    Unattributed,
    blame_all_gather,
    blame_send_recv_ring,
    judge_state_hashes,
)
from sdcscan.errors import UsageError


def ring_all_gather(ring, hop, sources):
    """The wrong (source, receiver) pairs when `hop` corrupts the blocks of `sources` in transit."""
    n, wrong = len(ring), set()
    for source in sources:
        at, corrupted = ring.index(source), False
        for step in range(n - 1):  # a block makes n - 1 hops and never comes back to its source
            sender, receiver = ring[(at + step) % n], ring[(at + step + 1) % n]
            corrupted = corrupted or (sender, receiver) == hop
            if corrupted:
                wrong.add((source, receiver))
    return wrong


def hops_of(ring):
    """Every hop of a ring, in order."""
    return [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]


# Rings of 2..8 ranks, in rank order and shuffled (the recorded order need not be sorted).
RINGS = [list(range(n)) for n in range(2, 9)] + [random.Random(n).sample(range(n), n) for n in range(3, 9)]
HOP_CASES = [(ring, hop) for ring in RINGS for hop in hops_of(ring)]


@pytest.mark.parametrize(("ring", "hop"), HOP_CASES)
def test_one_block_corrupted_on_a_hop_names_that_hop(ring, hop):
    """For every source whose block crosses the hop, its arc of wrong receivers names exactly that hop."""
    for source in (s for s in ring if s != hop[1]):  # hop[1]'s own block never crosses the hop
        wrong = ring_all_gather(ring, hop, [source])
        blame = blame_all_gather(ring, wrong)
        assert isinstance(blame, HopBlame), (source, blame)
        assert (blame.hop, blame.sources, blame.consistent) == (hop, (source,), True)
        assert set(blame.receivers) == {r for _, r in wrong}
        assert blame.receivers[0] == hop[1]
        # Only the block whose last hop this is leaves one wrong receiver, which a bad copy fits too.
        last_hop = ring[(ring.index(source) - 1) % len(ring)] == hop[1]
        assert blame.rank_alternative == (hop[1] if last_hop else None)


@pytest.mark.parametrize(("ring", "hop"), HOP_CASES)
def test_every_block_corrupted_on_a_hop_names_that_hop(ring, hop):
    """All sources' blocks corrupted on one hop: that hop, every rank but the sender wrong."""
    sources = [s for s in ring if s != hop[1]]
    blame = blame_all_gather(ring, ring_all_gather(ring, hop, sources))
    assert isinstance(blame, HopBlame)
    assert blame.hop == hop
    assert set(blame.sources) == set(sources)
    assert set(blame.receivers) == set(ring) - {hop[0]}
    assert blame.rank_alternative == (hop[1] if len(ring) == 2 else None)


def test_the_hop_sentence_names_hop_receivers_and_sources():
    """Hop 1→2 of a ring of four corrupting sources 0 and 1: the sentence a person reads."""
    blame = blame_all_gather([0, 1, 2, 3], ring_all_gather([0, 1, 2, 3], (1, 2), [0, 1]))
    assert blame.describe() == (
        "hop 1→2 corrupts blocks in transit: every receiver from rank 2 on along the ring"
        " got source 0's and source 1's blocks wrong"
    )


@pytest.mark.parametrize("ring", [r for r in RINGS if len(r) >= 3])
def test_one_bad_receiving_rank_is_named_alone(ring):
    """A rank that miscopies blocks it forwards intact: wrong alone, for all sources or some."""
    for rank in ring:
        others = [s for s in ring if s != rank]
        after = ring[(ring.index(rank) + 1) % len(ring)]  # its block's lap ends at `rank`
        for sources in (others, others[:2], [s for s in others if s != after][:1]):
            blame = blame_all_gather(ring, {(s, rank) for s in sources})
            expected = tuple(s for s in ring if s in sources)
            assert blame == RankBlame(rank, CAUSE_COPY, sources=expected), (rank, sources)
            assert f"rank {rank} miscopies" in blame.describe()


def test_a_lone_wrong_pair_at_the_end_of_a_lap_fits_hop_and_rank_both():
    """Source 3's block is wrong at rank 2 only, its last receiver: hop 1→2, and rank 2 named as the alternative."""
    blame = blame_all_gather([0, 1, 2, 3], {(3, 2)})
    assert blame == HopBlame(hop=(1, 2), sources=(3,), receivers=(2,), rank_alternative=2)
    assert "rank 2 alone miscopying what it received looks the same" in blame.describe()


@pytest.mark.parametrize(
    ("ring", "wrong", "reason"),
    [
        ([0, 1, 2, 3, 4, 5], {(0, 2), (3, 5)}, "wrong at rank 2 but right at rank 3"),
        ([0, 1, 2, 3, 4, 5], {(0, 1), (0, 3)}, "wrong at rank 1 but right at rank 2"),
        (
            [0, 1, 2, 3, 4, 5],
            {(0, 2), (0, 3), (0, 4), (0, 5), (3, 5), (3, 0), (3, 1), (3, 2)},
            "source 0 to hop 1→2 and source 3 to hop 4→5",
        ),
        ([0, 1, 2, 3], {(2, 2), (0, 1), (0, 2), (0, 3)}, "source 2's own block is wrong at rank 2"),
        ([0, 1], {(0, 1), (1, 0)}, "different hops"),
        ([5, 2, 7], {(5, 7), (2, 5)}, "different hops"),
    ],
)
def test_patterns_no_single_hop_or_rank_explains_are_unattributed(ring, wrong, reason):
    """Gaps in an arc, arcs after different hops, a wrong own block beside a hop: Unattributed, with why."""
    blame = blame_all_gather(ring, wrong)
    assert isinstance(blame, Unattributed)
    assert reason in blame.reason


def reference_blame(ring, wrong):
    """Brute force: the hop whose simulation gives exactly `wrong`, else one receiver, else nothing."""
    if not wrong:
        return "clean"
    sources = {s for s, _ in wrong}
    for hop in hops_of(ring):
        if ring_all_gather(ring, hop, sources) == wrong:
            return ("hop", hop)
    receivers = {r for _, r in wrong}
    return ("rank", receivers.pop()) if len(receivers) == 1 else "unattributed"


def kind_of(blame):
    """The verdict in reference_blame's terms."""
    if isinstance(blame, HopBlame):
        return ("hop", blame.hop)
    if isinstance(blame, RankBlame):
        return ("rank", blame.rank)
    return "clean" if isinstance(blame, Clean) else "unattributed"


@given(st.data())
def test_any_pair_set_gets_the_verdict_brute_force_gives(data):
    """Random pair sets (mostly unrelated pairs): hop, rank or Unattributed exactly as the brute force says."""
    n = data.draw(st.integers(1, 6))
    ring = data.draw(st.permutations(range(n)))
    pairs = st.tuples(st.sampled_from(ring), st.sampled_from(ring))
    wrong = data.draw(st.sets(pairs, max_size=n * n))
    assert kind_of(blame_all_gather(ring, wrong)) == reference_blame(ring, wrong)


def test_a_world_of_one_rank_can_only_miscopy_its_own_block():
    """World size 1: nothing wrong is Clean, its own block wrong is that rank, another rank is a usage error."""
    assert blame_all_gather([5], set()) == Clean()
    blame = blame_all_gather([5], {(5, 5)})
    assert blame == RankBlame(5, CAUSE_COPY, sources=(5,))
    assert "its own block" in blame.describe()
    with pytest.raises(UsageError, match="not on the ring"):
        blame_all_gather([5], {(5, 6)})


def test_a_world_of_two_ranks_cannot_tell_a_hop_from_a_receiver():
    """World size 2: every wrong block is a lone pair, so the hop comes with the receiver as alternative."""
    assert blame_all_gather([0, 1], {(0, 1)}) == HopBlame(
        hop=(0, 1), sources=(0,), receivers=(1,), rank_alternative=1
    )
    assert blame_all_gather([1, 0], {(1, 0)}).rank_alternative == 0


def test_a_wrong_own_block_alone_blames_its_rank():
    """(2, 2): rank 2's own block wrong in its output: no hop carried it, so rank 2's copy."""
    assert blame_all_gather([0, 1, 2, 3], {(2, 2)}) == RankBlame(2, CAUSE_COPY, sources=(2,))
    assert blame_all_gather([0, 1, 2, 3], {(2, 2), (0, 2)}) == RankBlame(2, CAUSE_COPY, sources=(0, 2))


def test_nothing_wrong_is_clean():
    """No wrong pair: Clean, on any ring."""
    assert blame_all_gather([3, 1, 2], []) == Clean()
    assert Clean().describe() == "every receiver got every block right"


@pytest.mark.parametrize(
    ("ring", "wrong"),
    [
        ([], set()),
        ([0, 1, 1], set()),
        ([0, -1], set()),
        ([0, True], set()),
        ([0, 1, 2], {(0, 3)}),
        ([0, 1], {(9, 1)}),
    ],
)
def test_bad_rings_and_pairs_are_usage_errors(ring, wrong):
    """An empty ring, a repeated or non-rank entry, a pair off the ring: UsageError."""
    with pytest.raises(UsageError):
        blame_all_gather(ring, wrong)


@pytest.mark.parametrize(("ring", "hop"), HOP_CASES)
def test_a_wrong_block_in_the_send_recv_ring_blames_its_hop_directly(ring, hop):
    """Explicit send/recv ring: the block from k wrong at its successor names hop k→successor."""
    assert blame_send_recv_ring(ring, {hop}) == (HopBlame(hop=hop, sources=(hop[0],), receivers=(hop[1],)),)


def test_send_recv_names_every_wrong_hop_in_ring_order_and_nothing_when_clean():
    """Two wrong hops: both, in ring order; none: an empty tuple."""
    ring = [4, 0, 3, 1, 2]
    assert [b.hop for b in blame_send_recv_ring(ring, {(2, 4), (0, 3)})] == [(0, 3), (2, 4)]
    assert blame_send_recv_ring(ring, set()) == ()
    assert blame_send_recv_ring([0, 1, 2], {(1, 2)})[0].describe() == (
        "hop 1→2 corrupts blocks in transit: rank 2 got source 1's block wrong"
    )


@pytest.mark.parametrize(("ring", "wrong"), [([0, 1, 2], {(0, 2)}), ([0, 1, 2], {(1, 1)}), ([0], {(0, 0)})])
def test_send_recv_pairs_that_are_not_hops_are_usage_errors(ring, wrong):
    """A pair whose receiver does not follow its source (a ring of one has no hops): UsageError."""
    with pytest.raises(UsageError, match="not a hop"):
        blame_send_recv_ring(ring, wrong)


def test_every_result_serialises_to_json_with_its_kind():
    """to_dict of every kind of result is plain JSON and says which kind it is."""
    results = [
        Clean(),
        blame_all_gather([0, 1, 2], {(0, 2)}),
        RankBlame(1, CAUSE_COMPUTE, loss=1.5, expected_loss=2.0),
        Unattributed("why"),
        judge_state_hashes({0: "a", 1: "a", 2: "b", 3: "b", 4: "a"}),
    ]
    kinds = [json.loads(json.dumps(r.to_dict())).get("kind") for r in results]
    assert kinds == ["clean", "hop", "rank", "unattributed", None]
    assert json.loads(json.dumps(results[-1].to_dict()))["findings"][0]["other_hop"] == [3, 4]


def hashes(*per_rank):
    """Rank i holds per_rank[i]."""
    return dict(enumerate(per_rank))


@pytest.mark.parametrize(
    ("state", "ring", "finding"),
    [
        (hashes("a", "a", "a", "a"), None, None),
        (
            hashes("a", "a", "x", "a", "a"),
            None,
            RankBlame(2, CAUSE_UPDATE, alternative_hops=((1, 2), (2, 3))),
        ),
        (hashes("x", "a", "a"), [1, 2, 0], RankBlame(0, CAUSE_UPDATE, alternative_hops=((2, 0), (0, 1)))),
        (
            hashes("a", "a", "x", "x", "x", "a", "a", "a"),
            None,
            HopBlame(hop=(1, 2), sources=(5,), receivers=(2, 3, 4), other_hop=(4, 5)),
        ),
        (
            hashes("x", "a", "a", "a", "a", "a", "a", "x"),
            None,
            HopBlame(hop=(6, 7), sources=(1,), receivers=(7, 0), other_hop=(0, 1)),
        ),
        (
            hashes("x", "a", "a", "a", "x", "a"),
            [3, 1, 4, 0, 2, 5],
            HopBlame(hop=(1, 4), sources=(2,), receivers=(4, 0), other_hop=(0, 2)),
        ),
        (
            hashes("a", "a", "x", "x", "y", "a", "a", "a"),
            None,
            HopBlame(hop=(1, 2), sources=(4, 5), receivers=(2, 3, 4)),
        ),
    ],
)
def test_hash_exchange_verdicts(state, ring, finding):
    """All equal: ok; one rank apart: its update; an arc of ranks apart: the hop into the arc."""
    verdict = judge_state_hashes(state, ring=ring)
    assert verdict.findings == (() if finding is None else (finding,))
    assert verdict.ok == (finding is None)


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (hashes("a", "b"), "two ranks disagree"),
        (hashes("a", "b", "c", "d"), "all 4 ranks hold different states"),
        (hashes("a", "a", "b", "b"), "hop 3→0 or on hop 1→2"),
        (hashes("a", "b", "a", "b"), "no group of ranks is larger"),
        (hashes("a", "x", "x", "a", "a", "x", "x", "a", "a", "a"), "2 separate stretches"),
        (hashes("a", "a", "x", "y", "x", "a", "a", "a"), "not neighbours"),
    ],
)
def test_hash_patterns_without_a_majority_or_an_arc_accuse_nobody(state, reason):
    """Two ranks, all different, an even split, two arcs, one wrong hash in two places: Unattributed."""
    (finding,) = judge_state_hashes(state).findings
    assert isinstance(finding, Unattributed)
    assert reason in finding.reason


def test_a_loss_unlike_its_replica_is_a_compute_error_on_that_rank():
    """Equal hashes, rank 3's loss differs from its recomputation: compute error on rank 3 only."""
    losses = {0: 1.5, 1: 2.0, 2: float("nan"), 3: 3.0}
    expected = {0: 1.5, 1: 2.0, 2: float("nan"), 3: 3.5}
    verdict = judge_state_hashes(hashes("a", "a", "a", "a"), losses=losses, expected_losses=expected)
    assert verdict.findings == (RankBlame(3, CAUSE_COMPUTE, loss=3.0, expected_loss=3.5),)
    assert "compute error on rank 3" in verdict.describe()
    assert "update" not in verdict.describe()
    clean = judge_state_hashes(hashes("a", "a", "a", "a"), losses=losses, expected_losses=losses)
    assert clean.ok
    assert clean.describe() == "every rank holds the same parameters and optimizer state"


def test_a_compute_error_and_a_divergent_update_are_both_reported_compute_first():
    """Two faults in one exchange: both findings, the compute error first."""
    verdict = judge_state_hashes(hashes("a", "x", "a"), losses={0: 1.0}, expected_losses={0: 2.0})
    assert [(f.rank, f.cause) for f in verdict.findings] == [(0, CAUSE_COMPUTE), (1, CAUSE_UPDATE)]
    assert RankBlame(1, CAUSE_UPDATE).describe().endswith("an error in its own update")


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"state": hashes("a", "a"), "ring": [0, 1, 2]},
        {"state": hashes("a", "a"), "losses": {0: 1.0}},
        {"state": hashes("a", "a"), "losses": {0: 1.0}, "expected_losses": {1: 1.0}},
        {"state": hashes("a", "a"), "losses": {5: 1.0}, "expected_losses": {5: 1.0}},
    ],
)
def test_hash_inputs_that_do_not_match_are_usage_errors(kwargs):
    """Hashes for other ranks than the ring, losses without expectations or for unknown ranks: UsageError."""
    state = kwargs.pop("state")
    with pytest.raises(UsageError):
        judge_state_hashes(state, **kwargs)


@given(st.data())
def test_a_transport_fault_under_a_majority_is_put_on_its_hop(data):
    """Simulated all-reduce: blocks corrupted on one hop leave a minority arc; the verdict names that hop."""
    n = data.draw(st.integers(3, 8))
    ring = data.draw(st.permutations(range(n)))
    hop = data.draw(st.sampled_from(hops_of(ring)))
    sources = data.draw(st.sets(st.sampled_from([s for s in ring if s != hop[1]]), min_size=1))
    wrong = ring_all_gather(ring, hop, sources)
    # A rank's state hash is, in effect, which blocks it holds wrong.
    state = {r: repr(sorted(s for s, rr in wrong if rr == r)) for r in ring}
    bad = {r for _, r in wrong}
    (finding,) = judge_state_hashes(state, ring=ring).findings
    if len(bad) < n - len(bad):
        if len(bad) == 1:  # looks like an update error on that rank, with the hop as an alternative
            assert (finding.rank, finding.cause) == (bad.pop(), CAUSE_UPDATE)
            assert hop in finding.alternative_hops
        else:
            assert isinstance(finding, HopBlame)
            assert (finding.hop, set(finding.receivers)) == (hop, bad)
    elif isinstance(finding, RankBlame):  # only its own block's first hop left the rank alone right
        assert hop in finding.alternative_hops
    elif isinstance(finding, HopBlame) and len(set(state.values())) == 2:  # the wrong ranks are no minority
        assert hop == finding.other_hop


def test_a_majority_holding_the_wrong_state_misleads_only_as_documented():
    """Two blocks corrupted on hop 0→1 of 8: the largest group is wrong, so the named hop is not the real one."""
    ring = list(range(8))
    wrong = ring_all_gather(ring, (0, 1), [0, 5])  # ranks 1-4 hold two wrong blocks, 5-7 one, 0 none
    state = {r: repr(sorted(s for s, rr in wrong if rr == r)) for r in ring}
    (finding,) = judge_state_hashes(state).findings
    assert (finding.hop, finding.receivers, finding.other_hop) == ((4, 5), (5, 6, 7, 0), None)
