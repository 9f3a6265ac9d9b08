"""``python -m llmtriage``."""

from llmtriage.entry import main

main()
