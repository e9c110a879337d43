"""A vLLM-compatible simulator for demos and tests (`sentinel sim`)."""
