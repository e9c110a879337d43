"""Rules: Prometheus alerting rule files, the alert state machine, promtool-format tests."""
