"""A distributed run's orchestration: the launcher (torch's elastic agent), each rank's run, and the
cluster report rank 0 writes. What runs inside the workers (collectives, attribution, lockstep)
lives in `sdcscan.distributed`."""
