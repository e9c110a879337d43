"""Two (or more) real `sentinel run` daemons sharing one PostgreSQL, for the HA tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from fixtures_ports import free_port
from sqlalchemy import text

from sentinel.incidents.db import Database

LEASE_S = 2.0
EVAL_S = 1.0

RULES = """\
groups:
  - name: ha
    rules:
      - alert: KVCacheHigh
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        for: 1s
        labels: {severity: page}
"""

SCRIPT = """#!/bin/sh
echo "$1 $(date +%s.%N)" >> "OUT"
"""

# How long a request to a daemon may take before it counts as no answer (a stopped or
# dead daemon refuses at once or is caught by the caller's own wait).
ANSWER_S = 10.0


def write_setup(folder: Path, db_url: str, targets: dict[str, str], hook_url: str) -> Path:
    """Rules and the allow-listed remediation script; returns the script's output file."""
    (folder / "rules.yaml").write_text(RULES)
    out = folder / "actions.log"
    script = folder / "fix.sh"
    script.write_text(SCRIPT.replace("OUT", str(out)))
    script.chmod(0o755)
    lines = [
        f"database: '{db_url}'", "rule_files: [rules.yaml]", f"evaluation_interval: {int(EVAL_S)}s",
        "probe_interval: 0s", f"ha: {{lease: {int(LEASE_S)}s}}", "targets:",
    ]
    # Generous scrape timeouts: on a loaded machine a failed scrape resolves an alert by
    # absence (as in Prometheus), and the next one fires it again: a real new occurrence.
    # 500 ms timeouts flapped the twenty-round test past its allowance beside other work.
    lines += [f"  - {{name: {n}, url: '{u}', scrape_interval: 1s, scrape_timeout: 1s}}"
              for n, u in targets.items()]
    lines += [
        # Ten targets firing together are a fleet incident by default (issue 49: one page
        # for the fleet, no per-target page or action); these tests count each target's
        # page and action across takeovers, so the fleet correlation is off here.
        "fleet: {enabled: false}",
        "receivers:", "  - name: oncall", f"    webhook: {{url: '{hook_url}', timeout: 1s}}",
        # 500 ms, not 200: an evaluation that queues a page wakes the notifier at once, so
        # the interval only paces retries and act-first releases, and each idle tick is a
        # few queries (200 ms made the notifier most of an idle daemon's CPU).
        "notify:", "  interval: 500ms",
        # The new leader decides a hold the old one could not release (tests/
        # test_actfirst_takeover.py). One gap remains: an old leader that parked an action
        # for approval and died before paging leaves its hold to the grace (2 m by default,
        # longer than a round's wait). 15 s keeps act-first in play and such a page late,
        # not missing.
        "  act_first: {grace: 15s}",
        "  route: {receiver: oncall, group_by: [alertname, target], group_wait: 0s, "
        "group_interval: 0s, repeat_interval: 1h}",
        "remediation:", f"  command_allowlist: [{script}]", "  max_concurrent: 10",
        "  breaker_failures: 10", "  lease: 3s", "  correlation_window: 0s",
        # KVCacheHigh comes back every round by design: its fix is never demoted here.
        "  verdicts: {demote: false}",
        "  policies:", "    - name: fix", "      alerts: [KVCacheHigh]", "      cooldown: 0s",
        "      max_per_hour: 1000",
        "      steps:", f"        - command: {{argv: [{script}, '{{target}}']}}",
        "          verify: false",
    ]
    (folder / "base.yaml").write_text("\n".join(lines) + "\n")
    return out


class Daemon:
    """One `sentinel run` subprocess with its own listen port; restartable after a kill."""

    def __init__(self, folder: Path, name: str, port: int | None = None,
                 config: Path | None = None) -> None:
        """`port=0`: listen on a port the daemon picks, read back from its log at each start
        (a port picked free here can be taken by another program during a start that a
        loaded machine stretches to 20-30 s: "address already in use", the daemon gone).
        Default: one free port picked now and kept across restarts.
        `config`: a config file of the caller's own instead of base.yaml; it must listen on
        port 0 (`listen: 127.0.0.1:0`), the port is read back from the log."""
        self.folder, self.name = folder, name
        if config is not None:
            self.config, self._fixed = config, 0
        else:
            self.config = folder / f"{name}.yaml"
            self._fixed = free_port() if port is None else port
            self.config.write_text((folder / "base.yaml").read_text()
                                   + f"listen: 127.0.0.1:{self._fixed}\n")
        self.log = folder / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = self._fixed or None
        self._log_from = 0

    @property
    def port(self) -> int:
        """The port this start listens on (0 until its "listening on" line, with port=0)."""
        if self._port is None:
            try:
                with open(self.log, "rb") as f:
                    f.seek(self._log_from)
                    m = re.search(rb"listening on [\d.]+:(\d+)", f.read())
            except FileNotFoundError:
                m = None
            self._port = int(m.group(1)) if m else None
        return self._port or 0

    def start(self) -> Daemon:
        self._port = self._fixed or None
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c",
                                          str(self.config)], stdout=log, stderr=log,
                                         cwd=self.folder, env=env)
        return self

    def readyz(self) -> str:
        # ANSWER_S, not a fraction of a second: beside stress-ng a leader's /readyz took
        # longer than 0.5 s, so the test never saw it lead in 120 s of polling.
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                        timeout=ANSWER_S) as r:
                return r.read().decode()
        except Exception:
            return ""

    def metric(self, name: str, labels: str = "") -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=ANSWER_S) as r:
                body = r.read().decode()
        except Exception:
            return None
        m = re.search(rf"^{re.escape(name + labels)} (\S+)$", body, re.M)
        return float(m.group(1)) if m else None

    def scrapes(self, targets: int) -> float:
        """The fewest successful scrapes of any of `targets` targets (0 until all answered)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=ANSWER_S) as r:
                body = r.read().decode()
        except Exception:
            return 0.0
        counts = [float(v) for v in re.findall(
            r'^sentinel_scrapes_total\{[^}]*outcome="success"[^}]*\} (\S+)$', body, re.M)]
        return min(counts) if len(counts) >= targets else 0.0

    def scraped(self, targets: int, n: int = 2) -> bool:
        """Every one of `targets` targets scraped successfully at least `n` times (its store
        holds their series: a standby taking over evaluates on data, not on nothing)."""
        return self.scrapes(targets) >= n

    def leads(self) -> bool:
        return "ha: leader" in self.readyz()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def wait(pred: Any, timeout_s: float, what: str, step: float = 0.2) -> Any:
    """Poll `pred` until truthy (its value), failing after `timeout_s`.

    0.2 s steps: the predicates here read every page received or query PostgreSQL, and a
    20 Hz poll of them cost more CPU than the two daemons under test; 0.2 s is short
    beside a 1 s evaluation interval."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def evaluations(d: Daemon, group: str = "ha") -> float:
    """Evaluations of `group` this daemon ran (a standby runs none; 0 when it does not answer)."""
    return d.metric("sentinel_rule_group_evaluations_total", f'{{group="{group}"}}') or 0.0


def quiet(db: Database) -> tuple[int, int] | None:
    """(timeline events, incidents) once no message is pending and no action runs, else None."""
    try:
        with db.session() as s:
            pending = s.execute(text(
                "SELECT count(*) FROM notify_outbox WHERE status = 'pending'")).scalar()
            intents = s.execute(text(
                "SELECT count(*) FROM notify_intents WHERE dispatched_at IS NULL")).scalar()
            running = s.execute(text("SELECT count(*) FROM remediation_attempts "
                                     "WHERE status = 'running'")).scalar()
            events = s.execute(text("SELECT count(*) FROM timeline_events")).scalar()
            incidents = s.execute(text("SELECT count(*) FROM incidents")).scalar()
    except Exception:  # the database is away: not quiet yet
        return None
    return (int(events or 0), int(incidents or 0)) if pending == intents == running == 0 else None


def settle(db: Database, *daemons: Daemon, evaluations_more: int = 3) -> None:
    """The negative wait, counted: whichever daemon leads has evaluated `evaluations_more`
    more times (three at 1 s: past one lease, so a late duplicate had its chance) and
    nothing is pending or running. Counted in evaluations, not seconds: a loaded machine
    stretches both alike."""
    start = {d.name: evaluations(d) for d in daemons}
    wait(lambda: any(evaluations(d) >= start[d.name] + evaluations_more for d in daemons)
         and quiet(db) is not None, 120,
         f"{evaluations_more} more evaluations on the leader and nothing pending")


def pages(sink: Any) -> list[tuple[str, str, str, str]]:
    """(target, status, startsAt, idempotency key) of every alert of every delivery."""
    out = []
    for _, body, headers in list(sink.received):
        key = headers.get("Idempotency-Key") or headers.get("idempotency-key") or ""
        for a in body.get("alerts", []):
            out.append((a["labels"].get("target", ""), a["status"], a["startsAt"], key))
    return out


class AlertOnly:
    """A sink's deliveries of one alert name only: remediation's own pages (such as
    SentinelRemediationGaveUp after an attempt a kill abandoned) carry the target too, and
    are not transitions of the alert under test."""

    def __init__(self, sink: Any, name: str = "KVCacheHigh") -> None:
        self.received = [(at, {**body, "alerts": [a for a in body.get("alerts", [])
                                                  if a["labels"].get("alertname") == name]},
                          headers)
                         for at, body, headers in list(sink.received)
                         if any(a["labels"].get("alertname") == name
                                for a in body.get("alerts", []))]


def page_report(sink: Any) -> dict[str, Any]:
    """Transitions paged, keys per transition, deliveries per key."""
    by_transition: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    deliveries: Counter[str] = Counter()
    for _, body, headers in list(sink.received):
        key = headers.get("Idempotency-Key") or ""
        deliveries[key] += 1
        for a in body.get("alerts", []):
            by_transition[(a["labels"].get("target", ""), a["status"], a["startsAt"])].add(key)
    return {"transitions": by_transition, "deliveries": deliveries}


def db_report(db: Database) -> dict[str, Any]:
    """Incidents, duplicated timeline events, remediation attempts by target and status."""
    with db.session() as s:
        incidents = s.execute(text("SELECT status, count(*) FROM incidents GROUP BY status")).all()
        dup_events = s.execute(text(
            "SELECT incident_id, kind, at, message, count(*) FROM timeline_events "
            "GROUP BY incident_id, kind, at, message HAVING count(*) > 1")).all()
        attempts = s.execute(text(
            "SELECT target, status, count(*) FROM remediation_attempts "
            "GROUP BY target, status")).all()
        per_incident = s.execute(text(
            "SELECT incident_id, count(*) FROM remediation_attempts GROUP BY incident_id "
            "HAVING count(*) > 1")).all()
        leases = s.execute(text("SELECT holder, epoch FROM ha_leases")).all()
    return {"incidents": dict((str(k), int(v)) for k, v in incidents),
            "dup_events": dup_events, "attempts": attempts, "multi_attempts": per_incident,
            "leases": leases}


def action_lines(path: Path) -> Counter[str]:
    """How many times the remediation script ran, per target."""
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines() if line.strip())


class PausableCluster:
    """A PostgreSQL cluster of the test's own, which it can stop and start again on the same
    port (a database outage). Built on fixtures_postgres's throwaway cluster."""

    def __init__(self) -> None:
        import fixtures_postgres as fp

        bindir = fp._pg_bindir()
        if bindir is None:
            reason = "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        self._fp = fp
        self._cluster = fp._Cluster(bindir)
        self.url = ""

    def start(self) -> str:
        self.url = self._cluster.start()
        return self.url

    def _ctl(self, *args: str) -> None:
        c = self._cluster
        self._fp._run([str(c.bindir / "pg_ctl"), "-D", str(c.data), *args])

    def pause(self) -> None:
        """Stop the server (`-m fast`, as `systemctl stop` does): every session is ended,
        nothing answers on the port. Not `immediate`: this throwaway cluster runs with
        fsync and synchronous_commit off, so a crash would lose commits a real server
        keeps (a claim the daemon saw committed, then acted on)."""
        self._ctl("-m", "fast", "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start it again on the same port."""
        c = self._cluster
        opts = (f"-p {c.port} -k {c.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._ctl("-o", opts, "-l", str(c.root / "log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._cluster.stop()
