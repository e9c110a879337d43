"""Incidents: firing alerts become incidents with a timeline, stored with SQLAlchemy."""
