"""Shared test fixtures. Area fixtures live in tests/fixtures_*.py and are registered here."""

pytest_plugins = ["fixtures_postgres", "fixtures_e2e", "notify_helpers"]
