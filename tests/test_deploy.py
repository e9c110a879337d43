"""The shipped deployment files work as shipped: the systemd unit verifies and is
hardened, its sysusers.d/tmpfiles.d files apply, the image builds in layers from a
lock file that matches pyproject.toml, and hadolint finds nothing.

systemd-analyze, systemd-sysusers, systemd-tmpfiles and hadolint are required under
CI=true; elsewhere those tests skip when the program is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "sentinel.service"
MAX_EXPOSURE = 3.0


def _need(program: str) -> str:
    path = shutil.which(program) or shutil.which(program, path=str(Path(sys.executable).parent))
    if path:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{program} is required in CI but is not installed")
    pytest.skip(f"{program} is not installed")


@pytest.fixture
def unit_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists here."""
    text = UNIT.read_text().replace("ExecStart=sentinel ", "ExecStart=/bin/true ")
    path = tmp_path / "sentinel.service"
    path.write_text(text)
    return path


def test_unit_verifies(unit_copy: Path) -> None:
    out = subprocess.run([_need("systemd-analyze"), "verify", str(unit_copy)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


def test_unit_is_hardened(unit_copy: Path) -> None:
    out = subprocess.run([_need("systemd-analyze"), "security", "--offline=yes",
                          f"--threshold={int(MAX_EXPOSURE * 10)}", str(unit_copy)],
                         capture_output=True, text=True, timeout=60)
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
    assert level, out.stdout + out.stderr
    assert float(level.group(1)) <= MAX_EXPOSURE, out.stdout
    assert out.returncode == 0, out.stdout


def test_unit_runs_as_the_sysusers_user_and_finds_its_data_without_sentinel_home() -> None:
    unit = UNIT.read_text()
    assert "User=sentinel" in unit and "StateDirectory=sentinel" in unit
    assert "SENTINEL_HOME" not in re.sub(r"#.*", "", unit)
    assert re.search(r"^u sentinel ", (DEPLOY / "sentinel.sysusers").read_text(), re.M)


def test_sysusers_and_tmpfiles_apply_to_a_fresh_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    for tool, name, extra in (("systemd-sysusers", "sentinel.sysusers", []),
                              ("systemd-tmpfiles", "sentinel.tmpfiles", ["--create"])):
        text = (DEPLOY / name).read_text()
        out = subprocess.run([_need(tool), f"--root={tmp_path}", *extra, "-"], input=text,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    assert "sentinel:" in (tmp_path / "etc" / "passwd").read_text()
    assert (tmp_path / "etc" / "sentinel").is_dir()
    assert (tmp_path / "var" / "lib" / "sentinel").is_dir()


def test_hadolint_finds_nothing() -> None:
    out = subprocess.run([_need("hadolint"), str(ROOT / "Dockerfile")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [(m.group(1).upper(), m.group(2)) for m in
            re.finditer(r"^([A-Za-z]+)\s+(.*)$", text, re.M) if not m.group(0).startswith("#")]


def test_image_installs_dependencies_before_the_code() -> None:
    steps = _instructions()
    index = {f"{k} {v}": i for i, (k, v) in enumerate(steps)}

    def where(prefix: str) -> int:
        found = [i for line, i in index.items() if line.startswith(prefix)]
        assert found, f"no {prefix!r} in the Dockerfile"
        return found[0]

    lock_copy = where("COPY requirements.lock")
    lock_install = where("RUN pip install --require-hashes -r requirements.lock")
    code_copy = where("COPY sentinel")
    assert lock_copy < lock_install < code_copy
    user = [v for k, v in steps if k == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert any(k == "VOLUME" and "/var/lib/sentinel" in v for k, v in steps)
    assert any(k == "HEALTHCHECK" and "/healthz" in v for k, v in steps)
    assert any(k == "ENV" and "SENTINEL_LISTEN=0.0.0.0:" in v for k, v in steps)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_lock_pins_every_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in ("postgres", "kubernetes"):  # the image installs both
        wanted |= {_name(r) for r in project["optional-dependencies"][extra]}
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {m.group(1).lower().replace("_", "-")
              for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==", lock, re.M)}
    missing = wanted - pinned
    assert not missing, (f"requirements.lock lacks {sorted(missing)}: regenerate it with "
                         "pip-compile (see the command at its top)")
    assert "--hash=sha256:" in lock


def test_run_rejects_a_bad_listen_address(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "sentinel", "run", "--listen", "nowhere"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--listen 'nowhere'" in out.stderr


def test_run_listens_where_listen_says(tmp_path: Path) -> None:
    import httpx
    from fixtures_e2e import wait_for

    from sentinel.config.model import DEFAULT_LISTEN

    # Port 0, not a port picked free here (another worker's process could take it during
    # a slow start): the port the daemon logs it bound proves SENTINEL_LISTEN was read (the
    # default listens on a fixed port). Its log to a file, not to a pipe nobody reads.
    env = dict(os.environ, SENTINEL_LISTEN="127.0.0.1:0")
    log = tmp_path / "daemon.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run"], cwd=tmp_path,
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        def listening() -> int:
            assert proc.poll() is None, log.read_text()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())
            return int(m.group(1)) if m else 0
        port = wait_for(listening, 60, "the daemon to log where it listens")
        assert f"127.0.0.1:{port}" != DEFAULT_LISTEN, "SENTINEL_LISTEN was not read"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert re.search(r"^process_resident_memory_bytes \S+$", metrics, re.M)
        # Where the CPU goes: the I/O loop's thread by its name.
        assert re.search(r'^sentinel_thread_cpu_seconds_total\{thread="sentinel-io"\} \S+$',
                         metrics, re.M), metrics
        assert re.search(r'^sentinel_build_info\{commit="[^"]+",python="3\.\d+\.\d+",'
                         r'version="[^"]+"\} 1\.0$', metrics, re.M), metrics
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_unit_raises_the_open_files_limit() -> None:
    limits = re.findall(r"^LimitNOFILE=(\d+)$", UNIT.read_text(), re.M)
    assert limits and int(limits[0]) >= 65536
