"""Collect: sources that turn observations into samples (scrape, probe, logs, tpu)."""
