"""``python -m llmtriage``."""

from llmtriage.cli import main

main()
