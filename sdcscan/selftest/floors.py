"""Whether a self-test row's detections fall short of its floor, judged as the sample it is.

A floor below 1.0 is a statistical claim (gemm_fp's exponent bits are caught 96-100% of the time, not
always), and the doctor runs only a few trials of each row: with 3 trials, one chance miss of a 0.96
floor (probability 1 - 0.96^3 = 11.5%) would read as 67% and fail the row. So a row misses its floor only
when so few detections would come from a detector that meets the floor less than once in 1/ALPHA runs
(a one-sided binomial test). A floor of 1.0 is the arithmetic's guarantee: any miss is a miss.

The price is a margin at every sample size: 2 of 3 meet a 0.96 floor and 1 of 3 does not; at 100 trials
91 detections meet it and 90 do not. ALPHA sets it: smaller, and the doctor would pass worse detectors;
larger, and it would fail good ones by chance, a row at a time.
"""

from __future__ import annotations

import math

ALPHA = 0.01  # a detector that meets its floor is failed by chance in under one run in a hundred, per row


def below_floor(detected: int, trials: int, floor: float) -> bool:
    """Whether `detected` of `trials` shows a detection rate below `floor` beyond chance."""
    if detected >= trials * floor:
        return False
    if floor >= 1.0:
        return True
    return binomial_cdf(detected, trials, floor) < ALPHA


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), 0 < p < 1, summed in log space (n may be thousands)."""
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
