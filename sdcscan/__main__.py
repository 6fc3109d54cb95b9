"""`python -m sdcscan`, and the `sdcscan` command (its console script calls `main`)."""

import sys


def main() -> None:
    try:
        from sdcscan.cli import main as command
    except KeyboardInterrupt:  # Ctrl-C while Python loads the command line: nothing has started
        sys.exit(130)
    command()


if __name__ == "__main__":  # not when multiprocessing re-imports the main module in a worker
    main()
