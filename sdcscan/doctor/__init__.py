"""`sdcscan doctor`: prove, in one bounded command, that sdcscan itself works on this host's stack.

Before a site trusts sdcscan's exit codes on new hardware, a driver or a torch build, the doctor shows
that the detectors fire and stay silent there, that digests reproduce, that an injected bad unit is
named and a hung or crashed one contained, how near its own peak each unit runs, and which optional
evidence sources can be read. It runs the real commands (`sdcscan selftest`, `sdcscan run`) as child
processes, so what it proves is what a fleet's cron job runs.

- `plan`: which units, how the budget is shared, the child command lines (pure).
- `children`: one child command in its own session: its time limit, signals, processes left behind.
- `environment`: versions, ISA, units and the optional sources, each readable or what to grant.
- `judge`: each step's judgement from recorded inputs (pure): what the fast tests drive.
- `steps`: a step's result and the exit code they add up to (pure).
- `checkup`: the steps in order, inside the budget; `bundle`: the --out directory.
"""
