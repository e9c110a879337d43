"""Collect: sources that turn observations into samples (scrape, later probe, logs, tpu)."""
