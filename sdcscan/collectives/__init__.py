"""Inside a worker of a distributed run: the world it joins, the lockstep of cases across ranks, the
collectives checked bit for bit, and blame per hop and per rank.

Launching the ranks and merging their reports happens outside the workers, in `sdcscan.launch`.
"""
