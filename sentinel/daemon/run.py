"""Run the App in the foreground until a signal says stop: SIGTERM/SIGINT drain, SIGHUP reloads."""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

from sentinel import exitcodes
from sentinel.config import Config
from sentinel.config.model import split_listen
from sentinel.daemon import gcpolicy
from sentinel.daemon.app import App
from sentinel.daemon.malloc import limit_arenas
from sentinel.daemon.nofile import check_descriptors
from sentinel.daemon.startsignals import Flag, take_pending
from sentinel.logformat import JsonFormatter, TextFormatter
from sentinel.preflight import listen_error_text
from sentinel.secretpatterns import PromptRedactor
from sentinel.secrets import RedactingFilter, hide_http_client_urls, install_redaction

log = logging.getLogger("sentinel")

STOP_TIMEOUT_S = 5.0
# How often the main thread looks at the signal flags: the latency of a SIGTERM or SIGHUP.
SIGNAL_POLL_S = 0.2


def setup_logging(level: str, config: Config, fmt: str = "text") -> RedactingFilter:
    """Log to stderr (journald and `docker logs` pick it up) with every known secret redacted.

    `fmt` is "text" (for people) or "json" (one object a line, for log pipelines).
    Returns the redaction filter: a reload gives it the new file's secrets.
    """
    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Shapes too: a crash line quoted in a log message carries other people's tokens.
    redaction = install_redaction(PromptRedactor(config.secrets()))
    handler.setFormatter(JsonFormatter(redaction) if fmt == "json" else TextFormatter())
    hide_http_client_urls()
    root.setLevel(level.upper())
    # APScheduler logs every job run at INFO, Alembic every migration step it checks:
    # far too chatty for a daemon's log.
    for chatty in ("apscheduler", "httpx", "alembic"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    return redaction


def config_loader(source: str | None, listen: str | None) -> Callable[[], Config]:
    """What a reload reads: the file `run` started with (else the built-in defaults), with
    the same --listen override, so an unchanged file never looks like a new address."""
    from sentinel.config import load_config

    def load() -> Config:
        config = load_config(source) if source is not None else Config.default()
        return config.model_copy(update={"listen": listen}) if listen else config
    return load


def run_daemon(config: Config, log_level: str = "INFO", log_format: str = "text",
               notes: Sequence[str] = (), listen_key: str = "listen",
               loader: Callable[[], Config] | None = None, source: str | None = None) -> int:
    """Start the App and block until SIGTERM or SIGINT; returns the exit code.

    `notes` are the pre-flight's warnings and notes (`warning: …`, `note: …`), logged
    once logging is set up; `listen_key` names what set the address in a bind error.
    `loader` reads the config file (`source`) again at each SIGHUP or POST /-/reload.
    """
    redaction = setup_logging(log_level, config, log_format)

    def learn_secrets(new: Config) -> None:
        # Old and new: messages about work begun under the old file may still carry them.
        redaction.redactor = PromptRedactor([*redaction.redactor.secrets, *new.secrets()])

    for note in notes:
        kind, _, text = note.partition(": ")
        log.log(logging.WARNING if kind == "warning" else logging.INFO, "%s", text)
    limit_arenas()
    gcpolicy.tune()
    # Discovered targets (kubernetes_sd) come later; the configured ones are known now.
    check_descriptors(len(config.targets))
    app = App(config, loader=loader, source=source, on_reload=learn_secrets)
    # Handlers first: a SIGTERM while starting (migrations, imports) drains like any other.
    # Flags, not Events: a handler that takes a lock can nest under a burst of signals.
    stop, reload = Flag(), Flag()
    signal.signal(signal.SIGTERM, stop.raise_)
    signal.signal(signal.SIGINT, stop.raise_)
    signal.signal(signal.SIGHUP, reload.raise_)
    queued = take_pending()
    if queued:
        log.info("SIGHUP received while starting: the configuration is reloaded once "
                 "started")
    try:
        app.start()
    except Exception as exc:
        app.stop(0)
        return _start_failed(exc, config.listen, listen_key)
    while not stop.is_up():
        if reload.take() or queued:
            queued = False
            log.info("SIGHUP: reloading the configuration")
            app.reload()
            continue
        time.sleep(SIGNAL_POLL_S)
    log.info("stopping")
    app.stop(STOP_TIMEOUT_S)
    if app.jobs_running():
        _abandon_jobs()
    return 0


def _abandon_jobs() -> None:
    """Exit now although a job still runs (an alert storm's evaluation, say).

    The interpreter would otherwise wait for the job's pool thread at exit, for
    as long as the job takes (issue 49: over 30 s under load, so systemd's
    SIGKILL came first). What the job had not committed is rolled back by the
    database when the connection goes, and the next start evaluates again: every
    evaluation is one transaction, so nothing is half written.
    """
    log.warning("exiting with jobs still running after %.0fs: their uncommitted work is "
                "rolled back and redone at the next start", STOP_TIMEOUT_S)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _start_failed(exc: Exception, listen: str, listen_key: str) -> int:
    """Log why the App did not start; the exit code (UNAVAILABLE for the listen address)."""
    hp = split_listen(listen)
    if isinstance(exc, OSError) and hp is not None and exc.errno in (
            errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        # The pre-flight found the address free; another program took it since.
        log.error("could not start: %s: %s: %s", listen_key, listen,
                  listen_error_text(exc, hp[1]))
        return exitcodes.UNAVAILABLE
    log.error("could not start: %s", exc)
    return exitcodes.FAILURE
