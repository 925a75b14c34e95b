"""`python -m healthbench` runs the command line."""

from .cli import main

main()
