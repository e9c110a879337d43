"""Where people look: the JSON API (`/api/v1`), Alertmanager's silences API (`/api/v2`),
tokens and audit, approvals, and the MCP tools, all over the daemon's one listener."""
