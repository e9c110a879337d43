"""Run the App in the foreground until a signal says stop: SIGTERM/SIGINT drain, SIGHUP reloads."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from sentinel.config import Config
from sentinel.daemon.app import App
from sentinel.secrets import Redactor, hide_http_client_urls, install_redaction

log = logging.getLogger("sentinel")

STOP_TIMEOUT_S = 5.0


def setup_logging(level: str, config: Config) -> None:
    """Log to stderr (journald and `docker logs` pick it up) with every known secret redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    install_redaction(Redactor(config.secrets()))
    hide_http_client_urls()
    root.setLevel(level.upper())
    # APScheduler logs every job run at INFO: far too chatty for a daemon's log.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_daemon(config: Config, log_level: str = "INFO") -> int:
    """Start the App and block until SIGTERM or SIGINT; returns the exit code."""
    setup_logging(log_level, config)
    app = App(config)
    # Handlers first: a SIGTERM while starting (migrations, imports) drains like any other.
    stop = threading.Event()
    reload = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: reload.set())
    try:
        app.start()
    except Exception as exc:
        log.error("could not start: %s", exc)
        app.stop(0)
        return 1
    while not stop.is_set():
        stop.wait(0.5)
        if reload.is_set():
            reload.clear()
            app.reload()
    log.info("stopping")
    app.stop(STOP_TIMEOUT_S)
    return 0
