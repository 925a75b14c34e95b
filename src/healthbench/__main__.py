"""`python -m healthbench` runs the command line."""

from healthbench.cli import main

main()
