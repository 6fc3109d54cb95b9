from sdcscan.cli import cli

if __name__ == "__main__":  # not when multiprocessing re-imports the main module in a worker
    cli()
