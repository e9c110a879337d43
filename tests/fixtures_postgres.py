"""PostgreSQL fixtures for the store tests (owned by the incidents work)."""
