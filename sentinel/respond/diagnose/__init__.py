"""Diagnosis: crash evidence → the self-hosted model → a structured runbook on the incident.

client.py   endpoints: /v1/models, /tokenize, /v1/chat/completions (streamed)
budget.py   token budget from max_model_len; evidence trimmed by priority
prompt.py   the messages, evidence marked as data
schema.py   the runbook's JSON schema, validation, the action allow-list
service.py  one diagnosis of one incident: endpoints in order, retry, store
worker.py   the scheduled job: open incidents with evidence and no runbook yet
annotations.py  what a webhook adds from the runbook (summary, runbook)

Model output is advice: nothing here runs or changes anything because of it.
"""
