"""`python -m sdcscan`, and the `sdcscan` command (its console script calls `main`)."""

import signal
import sys


def main() -> None:
    """The command, with SIGINT and SIGTERM handled from its first line on.

    Loading the command line takes a tenth of a second or more; a SIGTERM then (a job stopped as it
    starts) would otherwise end the process by the default action, with no `exit:` line. Both
    signals are blocked while the handlers are put in place, so one that comes meanwhile waits and is
    then handled: the command ends with 130/143 and `exit: interrupted`. What cannot be covered is the
    interpreter's own start-up, before any line of sdcscan runs.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    from sdcscan import interrupts

    interrupts.install()  # `cli` gives the signals back to Python for commands that do not stop gracefully
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        from sdcscan.cli import main as command
    except (KeyboardInterrupt, interrupts.Interrupted) as stop:  # nothing has started
        code = stop.exit_code if isinstance(stop, interrupts.Interrupted) else 130
        print("interrupted before the command started\nexit: interrupted", file=sys.stderr)
        interrupts.exit_untouchable(code)
    try:
        command()  # ends the process itself (`exit_untouchable`) once its own guard is in place
    except interrupts.Interrupted as stop:  # a signal between here and that guard (CI saw one: exit 1)
        print("interrupted\nexit: interrupted", file=sys.stderr)
        interrupts.exit_untouchable(stop.exit_code)


if __name__ == "__main__":  # not when multiprocessing re-imports the main module in a worker
    main()
