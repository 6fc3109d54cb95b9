"""The arithmetic of scripts/bench_time_to_detect.py: geometric quantiles, and the largest N a budget catches."""

from __future__ import annotations

import random

from tests.helpers.scripts import load_script

ttd = load_script("bench_time_to_detect")


def test_cases_needed_is_the_geometric_quantile_a_simulation_finds():
    rng = random.Random(3)
    p = 0.01
    draws = []
    for _ in range(20000):
        k = 1
        while rng.random() >= p:
            k += 1
        draws.append(k)
    draws.sort()
    for q in (0.5, 0.9):
        simulated = draws[int(q * len(draws))]
        assert abs(ttd.cases_needed(p, q) - simulated) <= 0.05 * simulated
    assert ttd.cases_needed(1.0, 0.9) == 1


def test_time_after_repeats_the_measured_cases_past_their_end():
    assert ttd.time_after(0, 2.0, [1.0, 3.0]) == 2.0
    assert ttd.time_after(3, 2.0, [1.0, 3.0]) == 2.0 + 4.0 + 1.0


def test_the_largest_n_caught_in_budget_is_caught_9_times_in_10_and_twice_it_is_not():
    m = {"detection": 0.9, "startup_s": 5.0, "case_s": [0.5] * 10, "mean_case_s": 0.5}
    out = ttd.predict(m, [10], budget_s=60.0)
    n = out["max_n_caught_p90"]
    fits = out["cases_in_budget"]
    assert fits == 110 and n > 1
    assert ttd.cases_needed(0.9 / n, 0.9) <= fits < ttd.cases_needed(0.9 / (2 * n), 0.9)
    assert ttd.predict({**m, "detection": 0.0}, [10], 60.0)["max_n_caught_p90"] == 0


def test_a_struck_case_is_caught_by_a_check_or_by_a_digest_the_peer_does_not_share():
    assert ttd.caught({"index": 1, "status": "mismatch", "digest": None}, {})
    assert ttd.caught({"index": 1, "status": "ok", "digest": "a"}, {1: "b"})
    assert not ttd.caught({"index": 1, "status": "ok", "digest": "a"}, {1: "a"})
    assert not ttd.caught({"index": 1, "status": "ok", "digest": "a"}, {})  # no peer: nothing to compare
