"""``llmtriage watch``, ``alerts``, ``dashboard`` and the fleet view of ``diagnose --prometheus``.

Watch servers live against SLOs (windowed TTFT/TPOT/ITL p95 from histogram deltas, queue, errors, token flow),
diagnose a breach as it starts, capture a bundle once per incident and record the series in SQLite; generate
Prometheus alerting rules and a Grafana dashboard with the metric names of the engine version; diagnose a fleet
through Prometheus's HTTP API.
"""
