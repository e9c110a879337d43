"""Respond: what Sentinel does about an incident (notify; later diagnose, remediate)."""
