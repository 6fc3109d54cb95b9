"""Launching a distributed run, outside the workers: the launcher (torch's elastic agent), each
rank's process (its run, and on rank 0 the gathering), and the cluster report rank 0 merges.

What a worker does once it is part of the world (joining, lockstep, the checked collectives, blame
per hop and per rank) lives in `sdcscan.collectives`.
"""
