"""Notify: receivers that deliver notifications to people and their tools."""
