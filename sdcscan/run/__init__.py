"""The run machinery beneath `sdcscan run` (sdcscan/scan.py): the plan each unit follows, the processes
that follow it and the parent that drives them, what bounds them (the watchdog, the host's capacity) and
when a failed case is run again. The journal, the events and the interrupt handling, which the report's
readers and the other commands share, stay beside sdcscan/scan.py."""
