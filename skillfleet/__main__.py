"""`python -m skillfleet`: the same as the `skillfleet` command."""

from skillfleet.cli import main

main()
