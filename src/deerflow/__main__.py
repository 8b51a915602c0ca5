"""`python -m deerflow` runs the command line."""

from deerflow.cli.app import main

main()
