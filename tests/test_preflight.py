"""`sentinel check config` refuses what `sentinel run` refuses, with the same line and exit code.

Issue 36: check config said SUCCESS for configs run then refused (or started
with and could never alert). Each case here runs both commands as a user would
(real subprocesses, real files, real sockets) and asserts one identical line
naming the key and the fix, and one identical exit code (sentinel.exitcodes).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel import exitcodes

ROOT = Path(__file__).resolve().parent.parent
# Every case listens on port 0 unless it is about `listen`: 9465 may be taken on a shared host.
QUIET = "listen: 127.0.0.1:0\nrule_files: []\n"


def sentinel(*args: str, env: dict[str, str] | None = None, user: str | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sentinel", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups", *argv]
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, env=full, cwd=cwd)


def refusal(cfg: Path, **kw: object) -> tuple[int, list[str]]:
    """Both commands' exit code and error lines; asserts they are the same."""
    check = sentinel("check", "config", str(cfg), **kw)  # type: ignore[arg-type]
    run = sentinel("run", "-c", str(cfg), **kw)  # type: ignore[arg-type]
    errors = [ln for ln in check.stderr.splitlines() if ln.startswith("error: ")]
    assert errors, check.stdout + check.stderr
    assert [ln for ln in run.stderr.splitlines() if ln.startswith("error: ")] == errors, (
        check.stderr, run.stderr)
    assert check.returncode == run.returncode, (check.stderr, run.stderr)
    assert "Traceback" not in check.stderr + run.stderr
    return check.returncode, errors


def one_refusal(cfg: Path, **kw: object) -> tuple[int, str]:
    code, errors = refusal(cfg, **kw)
    assert len(errors) == 1, errors
    return code, errors[0]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can read (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="sentinel-preflight-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_other_user() -> str | None:
    """Root passes every permission check: run as nobody there (needs setpriv)."""
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot test a permission refusal")
    closed = [p for p in (ROOT, *ROOT.parents) if not p.stat().st_mode & 0o001]
    if closed:  # e.g. a clone under `mktemp -d` (mode 0700)
        pytest.skip(f"nobody cannot run this checkout's code: {closed[0]} is closed to "
                    "other users (chmod o+x it)")
    return "nobody"


def test_a_rule_glob_matching_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text("listen: 127.0.0.1:0\nrule_files: [rules/*.yaml]\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.CONFIG
    assert line.startswith(f"error: {cfg}:2: rule_files[0]: matches no rule file: "
                           "'rules/*.yaml'")
    assert "omit rule_files to load the bundled rules" in line


def test_an_invalid_rule_file(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: 'rate(x[5m]'\n")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text("listen: 127.0.0.1:0\nrule_files: [bad.yaml]\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.CONFIG
    assert line.startswith(f"error: {tmp_path / 'bad.yaml'}:5")


def test_listening_off_loopback_without_tokens(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text("rule_files: []\nlisten: 0.0.0.0:0\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.CONFIG
    assert line == (f"error: {cfg}:2: listen: 0.0.0.0:0: not a loopback address, and "
                    "api.tokens is empty, so the API would be open to the network: add "
                    "api.tokens (a read and a write token) or listen on 127.0.0.1:0")
    # The same refusal names the flag when the flag set the address.
    flagged = sentinel("run", "-c", str(cfg), "--listen", "0.0.0.0:0")
    assert flagged.returncode == exitcodes.CONFIG
    assert "error: --listen: 0.0.0.0:0: not a loopback address" in flagged.stderr


def test_the_shipped_placeholder_token(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "api:\n  tokens:\n    - {name: r, token: CHANGE-ME-read-token}\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.CONFIG
    assert line.startswith(f"error: {cfg}:5: api.tokens[0].token: is the shipped placeholder")
    assert "CHANGE-ME-read-token" not in line  # a token's value is never printed


def test_the_listen_address_in_use(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(f"rule_files: []\nlisten: 127.0.0.1:{port}\n")
        code, line = one_refusal(cfg)
    assert code == exitcodes.UNAVAILABLE
    assert line.startswith(f"error: {cfg}:2: listen: 127.0.0.1:{port}: address already in use")
    assert "`listen` in the config or --listen" in line


def test_postgresql_without_its_driver(tmp_path: Path) -> None:
    # A Python without psycopg: an import hook refuses it, as a missing package would.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoPsycopg:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'psycopg':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoPsycopg())\n")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "database: postgresql://sentinel:pw-not-shown@127.0.0.1:9/s\n")
    code, line = one_refusal(cfg, env={"PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"})
    assert code == exitcodes.UNAVAILABLE
    assert line == (f"error: {cfg}:3: database: postgresql://sentinel:***@127.0.0.1:9/s: "
                    "PostgreSQL needs the psycopg driver, which this Python does not have: "
                    "pip install 'psycopg[binary]' (from a clone: pip install '.[postgres]')")


def test_postgresql_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + f"database: postgresql://sentinel:pw-not-shown@127.0.0.1:{port}/s\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.UNAVAILABLE
    assert line.startswith(f"error: {cfg}:3: database: postgresql://sentinel:***@127.0.0.1:"
                           f"{port}/s: cannot connect (")
    assert "check host, port, database name and credentials" in line
    assert "pw-not-shown" not in line


def test_a_sqlite_folder_this_user_cannot_write(shared_dir: Path) -> None:
    user = as_other_user()
    data = shared_dir / "data"
    data.mkdir()
    if user is None:
        data.chmod(0o555)
    cfg = shared_dir / "sentinel.yaml"
    cfg.write_text(QUIET + "database: sqlite:///data/s.db\n")  # relative: under the config
    code, line = one_refusal(cfg, user=user, cwd=Path("/"))
    assert code == exitcodes.UNAVAILABLE
    who = user or getpass.getuser()
    assert line.startswith(f"error: {cfg}:3: database: user {who} cannot write the SQLite "
                           f"folder {data} (owner "), line
    assert "StateDirectory=sentinel" in line
    assert not (data / "s.db").exists()


def test_a_log_file_this_user_cannot_read(shared_dir: Path) -> None:
    user = as_other_user()
    log = shared_dir / "vllm.log"
    log.write_text("INFO started\n")
    log.chmod(0o600 if user else 0o000)
    cfg = shared_dir / "sentinel.yaml"
    cfg.write_text(QUIET + f"database: 'sqlite://'\ntargets:\n  - name: a\n"
                   f"    url: http://127.0.0.1:9\n    logs: {{files: ['{log}']}}\n")
    code, line = one_refusal(cfg, user=user, cwd=Path("/"))
    assert code == exitcodes.UNAVAILABLE
    assert line.startswith(f"error: {cfg}:7: targets[0].logs.files[0]: user ")
    assert f"cannot read {log} (owner " in line


def test_a_receiver_secret_variable_not_set(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "receivers:\n  - name: r\n"
                   "    webhook: {url: '${SENTINEL_TEST_HOOK_NOT_SET}'}\n")
    env = {k: v for k, v in os.environ.items() if k != "SENTINEL_TEST_HOOK_NOT_SET"}
    check = subprocess.run([sys.executable, "-m", "sentinel", "check", "config", str(cfg)],
                           capture_output=True, text=True, timeout=90,
                           env={**env, "PYTHONPATH": str(ROOT)})
    run = subprocess.run([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                         capture_output=True, text=True, timeout=90,
                         env={**env, "PYTHONPATH": str(ROOT)})
    assert check.returncode == run.returncode == exitcodes.CONFIG
    assert check.stderr == run.stderr
    assert check.stderr.startswith(
        f"error: {cfg}:5: receivers[0].webhook.url: environment variable "
        "SENTINEL_TEST_HOOK_NOT_SET is not set: set it where Sentinel starts (systemd: ")


def test_a_receiver_secret_file_missing(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "receivers:\n  - name: r\n    slack: {url_file: secrets/slack}\n")
    code, line = one_refusal(cfg)
    assert code == exitcodes.CONFIG
    assert line.startswith(f"error: {cfg}:5: receivers[0].slack.url_file: cannot read "
                           f"{tmp_path / 'secrets' / 'slack'} as user ")
    assert "a relative path starts at the config file's folder" in line


def test_a_config_file_that_does_not_exist(tmp_path: Path) -> None:
    code, line = one_refusal(tmp_path / "nope.yaml")
    assert code == exitcodes.CONFIG
    assert line == (f"error: {tmp_path / 'nope.yaml'}: cannot read the config file (No such "
                    "file or directory): check the path given to -c/--config")


def test_check_config_offline_skips_what_asks_the_host(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "database: postgresql://sentinel@127.0.0.1:9/s\n")
    assert sentinel("check", "config", str(cfg)).returncode == exitcodes.UNAVAILABLE
    offline = sentinel("check", "config", "--offline", str(cfg))
    assert offline.returncode == exitcodes.OK, offline.stderr


def test_the_bundled_rules_load_when_rule_files_is_unset(tmp_path: Path) -> None:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"listen: 127.0.0.1:0\ndatabase: sqlite:///{tmp_path / 's.db'}\n")
    note = (f"{cfg}: rule_files: not set: loading the bundled rules (sentinel.yaml, "
            f"vllm.yaml in {ROOT / 'rules'}); write rule_files: [] for none")
    check = sentinel("check", "config", str(cfg))
    assert check.returncode == exitcodes.OK, check.stderr
    assert f"note: {note}" in check.stderr.splitlines()
    assert "SUCCESS" in check.stdout and "0 groups" not in check.stdout
    # `run` says the same at start, and starts with the bundled groups.
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "sentinel started" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text = "".join(seen)
    assert note in text, text
    started = next(ln for ln in seen if "sentinel started" in ln)
    assert " 0 rule groups" not in started, started


def test_an_address_held_by_a_running_sentinel_is_a_warning_for_check_config(
        tmp_path: Path) -> None:
    # `check config` before restarting the daemon must not fail on the daemon's own port;
    # `run` still refuses while it holds it. The holder answers as Sentinel's /metrics does.
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b'sentinel_build_info{version="0.1.0"} 1\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(f"rule_files: []\nlisten: 127.0.0.1:{port}\n")
        check = sentinel("check", "config", str(cfg))
        run = sentinel("run", "-c", str(cfg))
    finally:
        server.shutdown()
        server.server_close()
    assert check.returncode == exitcodes.OK, check.stderr
    assert (f"warning: {cfg}:2: listen: 127.0.0.1:{port}: address already in use"
            in check.stderr) and "by a running Sentinel" in check.stderr
    assert run.returncode == exitcodes.UNAVAILABLE
    assert f"error: {cfg}:2: listen: 127.0.0.1:{port}: address already in use" in run.stderr


@pytest.mark.integration
def test_postgresql_a_user_that_may_not_create_tables(postgres_url: str,
                                                      tmp_path: Path) -> None:
    # Reachable, but the daemon's first migration would fail: refused before it starts.
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin_url = make_url(postgres_url).set(drivername="postgresql+psycopg")
    role = f"sentinel_ro_{uuid.uuid4().hex[:8]}"
    schema = f"sentinel_ro_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {role}"))
    try:
        url = admin_url.set(username=role, password=f"pw-{role}").update_query_dict(
            {"options": f"-csearch_path={schema}"})
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET + f"database: '{url.render_as_string(hide_password=False)}'\n")
        code, line = one_refusal(cfg)
        assert code == exitcodes.UNAVAILABLE
        assert f"database: {url.render_as_string(hide_password=True)}: user {role} may not " \
               f"create tables in schema {schema}" in line
        assert f"GRANT CREATE ON SCHEMA {schema} TO {role}" in line
        assert f"pw-{role}" not in line
        # The owner may: the same config with the superuser passes the pre-flight.
        good = tmp_path / "good.yaml"
        good.write_text(QUIET + f"database: '{admin_url.render_as_string(hide_password=False)}'\n")
        ok = sentinel("check", "config", str(good))
        assert ok.returncode == exitcodes.OK, ok.stderr
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def test_a_rule_a_remote_backend_cannot_answer_is_a_warning(tmp_path: Path) -> None:
    """Issue 40: a mixed rule is split; one that cannot be split goes to the backend whole."""
    (tmp_path / "r.yaml").write_text(
        "groups:\n- name: g\n  rules:\n"
        "  - alert: Mixed\n    expr: sentinel_probe_success == 0 and on (target) up == 1\n"
        "  - alert: MixedSubquery\n"
        "    expr: max_over_time((sentinel_probe_success * on (target) up)[5m:1m]) == 0\n"
        "  - alert: OwnOnly\n    expr: sentinel_probe_success == 0\n"
        "  - alert: BackendOnly\n    expr: up == 0\n")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text("listen: 127.0.0.1:0\nrule_files: [r.yaml]\n"
                   "query_backend: {url: 'http://127.0.0.1:9'}\n")
    check = sentinel("check", "config", "--offline", str(cfg))
    assert check.returncode == 0, check.stderr
    warnings = [ln for ln in check.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings == [
        f"warning: {cfg}:3: query_backend: rule g/MixedSubquery cannot be answered with a "
        "query backend: the subquery (sentinel_probe_success * on (target) up)[300s:60s] "
        "reads both Sentinel's own series and the backend's; it goes to the backend whole, "
        "where Sentinel's own series match nothing: split it into a rule on Sentinel's "
        "series and one on the backend's"]
    # The embedded store answers every rule: nothing to say.
    cfg.write_text("listen: 127.0.0.1:0\nrule_files: [r.yaml]\n")
    check = sentinel("check", "config", "--offline", str(cfg))
    assert check.returncode == 0 and "warning:" not in check.stderr, check.stderr


def test_a_remote_backend_answers_every_bundled_rule() -> None:
    """VLLMTimeToFirstTokenHigh and VLLMEngineStalled mix probe and vLLM series: split."""
    from sentinel.config import Config
    from sentinel.config.querybackend import QueryBackendConfig
    from sentinel.preflight import WARNING, preflight

    cfg = Config.default().model_copy(
        update={"query_backend": QueryBackendConfig(url="http://127.0.0.1:9")})
    found = [f.message for f in preflight(cfg, None, offline=True).findings
             if f.kind == WARNING and f.key == "query_backend"]
    assert found == []
    assert not preflight(Config.default(), None, offline=True).refused
