"""The daemon: an App that owns the lifecycle, the scheduler and the HTTP endpoints."""
