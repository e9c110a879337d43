"""Remediation: guarded, allow-listed actions that fix what the response policy allows.

    guards.py     pure decisions (state, now, policy) -> Decision(allowed, reason)
    base.py       the Action protocol, its context, check and outcome types
    actions/      one file per action (docker_restart, systemd_restart, command,
                  tpu_node_restart, xla_cache_backup)
    docker_api.py Docker Engine API over its unix socket (httpx)
    verify.py     /health 200 and a one-token completion, within a deadline
    state.py      guard state and attempts in the database
    engine.py     decide → intent → act → outcome → verify, each step on the timeline
"""
