"""Sentinel: an SRE daemon for vLLM inference fleets."""

__version__ = "0.1.0"
