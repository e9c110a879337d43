"""Pre-flight: what `sentinel run` would refuse, found before anything starts.

`preflight(config, source)` runs every check below and returns its findings;
`sentinel check config` prints them, and `sentinel run` prints the same lines
and refuses to start on any error among them. Each check is written once,
here, so the two commands cannot disagree. A finding names the key (or the
flag that set it), the value, and the fix.

What depends on the file alone is checked while loading it (the config
models), so every command refuses it: a rule-file glob that matches nothing,
a placeholder token, an unset `${VAR}`, an unreadable secret file. Here are
the checks that need the host or more than one key:

    listen      off loopback only with api.tokens; the address free and assignable
    database    the driver installed; SQLite's folder writable by this user;
                PostgreSQL reachable, not a standby, writable by its user
    rules       the rule files and the crash signatures parse
    log files   readable by this user (missing: a warning; vLLM may not have started)
    tls files   loaded as the scraper loads them (preflightchecks.py)
    metrics     each `vllm:` name a rule selects is one vLLM exposes, with a did-you-mean
    network     only when asked (`check config --network`): model endpoints and receivers

`offline=True` skips the checks that ask the host (listen, database, log
files), for a config written for another machine.
"""

from __future__ import annotations

import errno
import importlib
import os
import pwd
import re
import socket
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sentinel.config import Config
from sentinel.config.load import format_path
from sentinel.config.model import split_listen
from sentinel.findings import ERROR, NOTE, UNAVAILABLE, WARNING, Finding

if TYPE_CHECKING:
    from sentinel.rules.loader import RuleGroup

PG_CONNECT_TIMEOUT_S = 5


@dataclass
class Preflight:
    """Every finding, and the rule groups loaded on the way (check config counts them)."""

    findings: list[Finding] = field(default_factory=list)
    groups: list[RuleGroup] = field(default_factory=list)

    @property
    def refused(self) -> list[Finding]:
        """The findings that stop `run`."""
        return [f for f in self.findings if f.kind in (ERROR, UNAVAILABLE)]

    @property
    def config_is_wrong(self) -> bool:
        """Whether a refusal is the file's fault (else only the host's: UNAVAILABLE)."""
        return any(f.kind == ERROR for f in self.findings)


def finding_lines(findings: list[Finding]) -> list[str]:
    """The lines `check config` and `run` print, one a finding: `error: FILE:LINE: KEY: …`."""
    return [f"{'error' if f.kind in (ERROR, UNAVAILABLE) else f.kind}: {f}" for f in findings]


def preflight(config: Config, source: str | None, *, listen_flag: bool = False,
              offline: bool = False, for_run: bool = True, network: bool = False,
              strict: bool = False) -> Preflight:
    """Run every check; `source` is the config file (None: the built-in defaults).

    `listen_flag`: `listen` came from --listen (findings name the flag). `for_run`
    False (check config): an address held by a running Sentinel is a warning, as
    checking a config before restarting the daemon is what check config is for.
    `network`: also reach the model endpoints and receivers. `strict`: a rule
    selecting a name vLLM does not expose is an error, not a warning.
    """
    from sentinel.notifycheck import who_is_told
    from sentinel.preflightchecks import check_network, check_tls_files

    found = check_listen(config, listen_flag, offline, for_run) + check_tls_files(config)
    if not offline:
        found += check_database(config) + check_log_files(config)
    if network and not offline:
        found += check_network(config)
    return _with_rules(config, source, found + who_is_told(config), strict)


def preflight_reload(config: Config, source: str | None) -> Preflight:
    """What a running daemon checks before it takes a reloaded file: `run`'s checks but
    the listen address and the database, which it holds (changing them needs a restart)."""
    from sentinel.preflightchecks import check_tls_files

    # The listen address stays, but tokens follow the file: none off loopback is refused.
    found = check_listen(config, False, offline=True) + check_log_files(config)
    return _with_rules(config, source, found + check_tls_files(config))


def _with_rules(config: Config, source: str | None, found: list[Finding],
                strict: bool = False) -> Preflight:
    """`found` and the rule checks, each finding about a key placed at its FILE:LINE."""
    from sentinel.preflightchecks import check_rule_metrics

    rule_findings, groups = check_rules(config)
    rule_findings += check_rules_answerable(config, groups) + check_rule_metrics(groups, strict)
    # Each finding about a key gets the key's FILE:LINE; a rule file's own lines have theirs.
    # The file is read again for the lines only when a finding needs them (at 50,000
    # targets that is seconds).
    findings = found + rule_findings
    keys = [f.key for f in findings if not (f.where or not f.key or f.key.startswith("--"))]
    where = _locator(source, keys) if keys else (lambda key: "")
    placed = [f if f.where or not f.key or f.key.startswith("--")
              else Finding(f.kind, f.key, f.message, where(f.key))
              for f in findings]
    return Preflight(placed, groups)


def _locator(source: str | None, keys: Sequence[str] = ()) -> Callable[[str], str]:
    """key → `FILE:LINE` (or FILE, or "" for the built-in defaults).

    When every key asked for is a top-level one (`rule_files`), the lines are found
    by their text (`^key:`) instead of parsing the file again: at 50,000 targets a
    second parse costs seconds for one note about `rule_files` (issue 49).
    """
    if source is None:
        return lambda key: ""
    from sentinel.config.yamlpos import YamlSyntaxError, load_positioned

    try:
        text = Path(source).read_text(encoding="utf-8")
        if keys and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in keys):
            lines = _top_level_lines(text, keys)
        else:
            lines = {format_path(p): line
                     for p, line in load_positioned(text).lines.items()}
    except (OSError, UnicodeDecodeError, YamlSyntaxError):
        return lambda key: source

    def where(key: str) -> str:
        # A target's client keys may be inherited from the top level: point there.
        line = lines.get(key) or lines.get(key.split(".", 1)[-1] if key.startswith("targets[")
                                            else key)
        return f"{source}:{line}" if line else source

    return where


def _top_level_lines(text: str, keys: Sequence[str]) -> dict[str, int]:
    """The line of each top-level `key:` in a YAML mapping's text (at column 0)."""
    out: dict[str, int] = {}
    for key in keys:
        found = re.search(rf"^{re.escape(key)}\s*:", text, re.M)
        if found is not None:
            out[key] = text.count("\n", 0, found.start()) + 1
    return out


# -- listen ------------------------------------------------------------------------------


def check_listen(config: Config, listen_flag: bool, offline: bool = False,
                 for_run: bool = True) -> list[Finding]:
    """Off loopback only with tokens; the address must be free and assignable."""
    from sentinel.api.auth import is_loopback

    key = "--listen" if listen_flag else "listen"
    hp = split_listen(config.listen)
    if hp is None:  # validated by the model and by the flag's parser
        return [Finding(ERROR, key, f"{config.listen!r}: expected host:port")]
    host, port = hp
    if not is_loopback(host) and not config.api.tokens:
        return [Finding(ERROR, key, f"{config.listen}: not a loopback address, and api.tokens "
                        "is empty, so the API would be open to the network: add api.tokens (a "
                        f"read and a write token) or listen on 127.0.0.1:{port}")]
    if offline or port == 0:
        return []
    problem = bind_problem(host, port)
    if problem is None:
        return []
    if problem.startswith("address already in use") and not for_run \
            and _sentinel_answers(host, port):
        return [Finding(WARNING, key, f"{config.listen}: {problem} — by a running Sentinel: "
                        "fine before restarting it; `run` refuses while it runs")]
    return [Finding(UNAVAILABLE, key, f"{config.listen}: {problem}")]


def bind_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on now, with the fix; None when it can.

    Binds as the status server does (SO_REUSEADDR) and closes at once. `run` also
    turns its own bind error into this text (`listen_error_text`), for the race.
    """
    try:
        infos = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot resolve {host!r} ({exc.strerror}): use an IP address of this host"
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        return listen_error_text(exc, port)
    finally:
        sock.close()
    return None


def listen_error_text(exc: OSError, port: int) -> str:
    """An OSError from binding the listen address, as a reason and a fix (no key)."""
    if exc.errno == errno.EADDRINUSE:
        return (f"address already in use (another program listens there; `ss -ltnp "
                f"'sport = :{port}'` shows which): stop it, or choose another address with "
                "`listen` in the config or --listen")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ("not an address of this host: use one of its addresses, 127.0.0.1, or "
                "0.0.0.0 for all")
    if exc.errno == errno.EACCES:
        return (f"permission denied: port {port} is below 1024 (needs root or "
                "CAP_NET_BIND_SERVICE): use a port above 1024, e.g. 9465")
    return f"cannot listen there: {exc.strerror or exc}"


def _sentinel_answers(host: str, port: int) -> bool:
    """Whether the program on the address is a Sentinel (its /metrics has sentinel_build_info)."""
    import httpx

    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        reply = httpx.get(f"http://{netloc}/metrics", timeout=2.0)
    except httpx.HTTPError:
        return False
    return "sentinel_build_info" in reply.text


# -- database ----------------------------------------------------------------------------


def check_database(config: Config) -> list[Finding]:
    """The driver installed; SQLite's folder writable; PostgreSQL reachable and writable."""
    from sqlalchemy.engine import make_url

    url = make_url(config.database)
    if url.get_backend_name() == "sqlite":
        return _check_sqlite(url.database or "")
    driver = url.get_driver_name() if "+" in url.drivername else "psycopg"
    try:  # imported, not only found: a driver that is there but broken is as good as absent
        importlib.import_module(driver)
    except ImportError:
        return [Finding(UNAVAILABLE, "database", f"{_safe(config.database)}: PostgreSQL needs "
                        f"the {driver} driver, which this Python does not have: pip install "
                        "'psycopg[binary]' (from a clone: pip install '.[postgres]')")]
    return _check_postgresql(config.database)


def _check_sqlite(name: str) -> list[Finding]:
    if name in ("", ":memory:") or name.startswith("file:"):
        return []
    path = Path(name).absolute()
    user = _user()
    if path.is_dir():
        return [Finding(ERROR, "database", f"{path} is a folder: name a file in it, e.g. "
                        f"sqlite:///{path / 'sentinel.db'}")]
    folder = path.parent
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return [Finding(ERROR, "database", f"{path}: {existing} is not a folder")]
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        return [Finding(UNAVAILABLE, "database", f"user {user} cannot write {path} "
                        f"({_owner_mode(path)}): give {user} write access, or point database "
                        "at a file it can write")]
    if not os.access(existing, os.W_OK | os.X_OK):
        # SQLite writes its -wal and -shm files beside the database: the folder must be
        # writable even when the file already is.
        what = "folder" if existing == folder else f"folder {folder} cannot be created and"
        return [Finding(UNAVAILABLE, "database", f"user {user} cannot write the SQLite "
                        f"{what} {existing} ({_owner_mode(existing)}), where {path.name} and "
                        f"its -wal file go: make it writable for {user} (systemd: "
                        "StateDirectory=sentinel), or point database at a folder it can "
                        "write, e.g. sqlite:////var/lib/sentinel/sentinel.db")]
    return []


def _check_postgresql(url_text: str) -> list[Finding]:
    from sqlalchemy import text

    from sentinel.incidents.db import Database, DatabaseError, normalize_url

    url = normalize_url(url_text)
    if "connect_timeout" not in url.query:
        url = url.update_query_dict({"connect_timeout": str(PG_CONNECT_TIMEOUT_S)})
    db = Database(url)
    try:
        db.check()
        with db.session() as s:
            standby = s.execute(text("SELECT pg_is_in_recovery()")).scalar()
            # The daemon migrates at start (CREATE in the schema) and writes every table.
            user, schema, can_create = s.execute(text(
                "SELECT current_user, current_schema(), "
                "coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)")).one()
    except DatabaseError as exc:
        # One line, and the URL as written (without the timeout added here).
        detail = " ".join(str(exc).replace(db.safe_url, "").split()).removeprefix("database : ")
        return [Finding(UNAVAILABLE, "database", f"{_safe(url_text)}: cannot connect "
                        f"({detail}): check host, port, database name and credentials (the "
                        "password from the environment)")]
    finally:
        db.dispose()
    if standby:
        return [Finding(UNAVAILABLE, "database", f"{_safe(url_text)} is a read-only standby: "
                        "point database at the primary")]
    if not can_create:
        return [Finding(UNAVAILABLE, "database", f"{_safe(url_text)}: user {user} may not "
                        f"create tables in schema {schema} (Sentinel migrates at start): GRANT "
                        f"CREATE ON SCHEMA {schema} TO {user}, or make {user} its owner")]
    return []


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# -- files -------------------------------------------------------------------------------


def check_log_files(config: Config) -> list[Finding]:
    """Log files this user cannot read are refused; missing ones are a warning."""
    out: list[Finding] = []
    user = _user()
    for i, t in enumerate(config.targets):
        for j, name in enumerate(t.logs.files):
            key = format_path(("targets", i, "logs", "files", j))
            path = Path(name)
            if not path.exists():
                out.append(Finding(WARNING, key, f"{path} does not exist (yet): Sentinel "
                                   "follows it once it appears"))
            elif not os.access(path, os.R_OK):
                out.append(Finding(UNAVAILABLE, key, f"user {user} cannot read {path} "
                                   f"({_owner_mode(path)}): add {user} to the file's group "
                                   "(systemd: SupplementaryGroups=) or make it readable"))
    return out


def check_rules(config: Config) -> tuple[list[Finding], list[RuleGroup]]:
    """The rule files (and the crash signatures, with log sources) parse; the groups loaded."""
    from sentinel.daemon.sources import has_log_sources, signatures_path
    from sentinel.logs.signatures import SignatureFileError, load_signature_file
    from sentinel.rules.loader import RuleFileError, load_rule_files

    out: list[Finding] = []
    paths = config.rule_paths()
    if config.rule_files is None:
        folder = paths[0].parent if paths else "?"
        out.append(Finding(NOTE, "rule_files", f"not set: loading the bundled rules "
                           f"({', '.join(p.name for p in paths)} in {folder}); write "
                           "rule_files: [] for none"))
    groups: list[RuleGroup] = []
    try:
        groups = load_rule_files([str(p) for p in paths], frozenset(config.promql_features))
    except RuleFileError as exc:
        out += [Finding(ERROR, "", p) for p in exc.problems]
    if has_log_sources(config):
        try:
            load_signature_file(signatures_path(config))
        except SignatureFileError as exc:
            out += [Finding(ERROR, "", p) for p in exc.problems]
    return out, groups


def check_rules_answerable(config: Config, groups: list[RuleGroup]) -> list[Finding]:
    """With a remote backend: rules that cannot be answered in that mode.

    A rule reading Sentinel's own series (`sentinel_*`, ALERTS, its own
    recording rules) and the backend's is split between the two
    (rules/split.py); one that cannot be split goes to the backend whole,
    which does not have Sentinel's series: that part never matches. A
    recording rule left to the backend's ruler that reads Sentinel's series
    never sees them either.
    """
    if config.query_backend is None:
        return []
    from sentinel.rules.backend import local_names_of, unanswerable

    names = local_names_of(groups)
    out = []
    for g in groups:
        for rule in g.rules:
            why = unanswerable(rule.query if rule.query is not None else rule.expr, names)
            if why:
                out.append(Finding(WARNING, "query_backend", (
                    f"rule {g.name}/{rule.name} cannot be answered with a query backend: "
                    f"{why}; it goes to the backend whole, where Sentinel's own series "
                    "match nothing: split it into a rule on Sentinel's series and one on "
                    "the backend's")))
    return out


# -- helpers -----------------------------------------------------------------------------


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _owner_mode(path: Path) -> str:
    st = path.stat()
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"owner {owner}, mode {stat.filemode(st.st_mode)}"
