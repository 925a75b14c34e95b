"""``python -m healthbench.testing``: serve a fake OpenAI-compatible endpoint."""

from healthbench.testing.cli import main

main()
