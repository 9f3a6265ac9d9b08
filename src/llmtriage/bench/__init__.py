"""``llmtriage bench``: an OpenAI-compatible streaming load generator whose numbers can be trusted.

The flow: ``plan`` turns the configuration into requests (deterministic prompts, arrival times),
``runner`` sends them from one or more worker processes (``client`` times one request, ``sse`` reads its
stream), ``summary`` and ``server_metrics`` turn the records and the server's /metrics into figures, and
``result`` gives them their on-disk form (docs/bench-schema.md). ``compare``, ``explain`` and ``render`` serve
the CLI. Nothing here prints or parses argv.
"""
