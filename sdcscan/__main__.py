from sdcscan.cli import cli

cli()
