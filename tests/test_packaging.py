"""The built wheel works on its own: installed (not editable) in a fresh
virtual environment, run from an empty folder, it finds its rules, signatures
and migrations inside the package.

The wheel is built the way a package index's users get it: `python -m build`
makes the sdist, then the wheel from the unpacked sdist (not from the checkout),
so everything the wheel needs must travel in the sdist.

Slow (two builds and a dependency install): marked `slow`, run by CI.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CRASH_LOG = ROOT / "tests" / "data" / "logs" / "tpu_hbm_oom.log"

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env=env)
    assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


def _build_and_install(work: Path) -> Path:
    """Build the sdist, then the wheel from it, into `work`; install it in a fresh venv there."""
    dist = work / "dist"
    # sdist first, then the wheel from the unpacked sdist: `python -m build`'s default.
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=work,
         timeout=600)
    sdists = list(dist.glob("sentinel_sre-*.tar.gz"))
    wheels = list(dist.glob("sentinel_sre-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, (sdists, wheels)
    with tarfile.open(sdists[0]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"rules/vllm.yaml", "rules/signatures.yaml", "migrations/env.py",
            "sentinel/_build.json"} <= names, "the sdist lacks what the wheel is built from"
    env_dir = work / "venv"
    # No pip of its own: this pip installs into it (`--python`). Bootstrapping pip into the
    # venv (ensurepip) cost ~4 CPU-s and a second pip ~9 more, for the same installed files.
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    # Without PYTHONPATH: the build leaves sentinel_sre.egg-info in the checkout, and with the
    # checkout on PYTHONPATH pip finds the project "already satisfied" and installs nothing.
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheels[0])],
         cwd=work, timeout=600, env=_clean_env())
    (work / "ready").touch()
    return env_dir / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this checkout installed; its bin/ folder.

    Built once per run, whichever xdist worker asks first: the build writes build/ and
    *.egg-info into the checkout, so two at once break each other's wheel (seen: "No
    module named sentinel" in the installed venv). The other workers wait on the lock
    and use the same venv. (xdist_group cannot pin these tests to one worker: with
    pytest 9.2 --dist loadgroup groups nothing, pytest-dev/pytest-xdist#1386.)
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, shared by its workers
    work = base / "packaging-wheel"
    with (base / "packaging-wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (work / "ready").exists():
            return work / "venv" / "bin"
        shutil.rmtree(work, ignore_errors=True)  # what a failed build left
        work.mkdir()
        return _build_and_install(work)


def _clean_env() -> dict[str, str]:
    # Nothing may point the installed copy back at this checkout.
    env = {k: v for k, v in os.environ.items()
           if k not in ("SENTINEL_HOME", "SENTINEL_MIGRATIONS_DIR", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_installed_wheel_is_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    out = _run([str(installed / "python"), "-c",
                "import sentinel, sentinel.paths as p;"
                "print(sentinel.__file__); print(p.bundled_dir('migrations'))"],
               cwd=tmp_path, timeout=60, env=_clean_env())
    module, migrations = out.stdout.split()
    assert str(ROOT) not in module and str(ROOT) not in migrations
    assert (Path(migrations) / "env.py").is_file()
    version = _run([str(installed / "sentinel"), "--version"], cwd=tmp_path, timeout=60,
                   env=_clean_env()).stdout
    assert "commit unknown" not in version, "the wheel carries the commit it was built from"
    assert any((Path(migrations) / "versions").glob("0001_*.py"))


def test_demo_runs_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    # The README's first command, as a user gets it: the one test that runs the demo.
    out = _run([str(installed / "sentinel"), "demo"], cwd=tmp_path, timeout=120,
               env=_clean_env())
    assert "opened" in out.stdout and "resolved" in out.stdout
    assert "webhook received: status=firing" in out.stdout
    assert "webhook received: status=resolved" in out.stdout
    # Beside the backlog, the stalled engine is caught in the same minute (issue 12).
    assert "webhook received: status=firing alerts=[VLLMEngineStalled@demo-gemma-stall]" in (
        out.stdout)
    assert re.search(r"incidents #\d+ \(VLLMRequestsQueued\) and #\d+ \(VLLMEngineStalled\) "
                     r"opened, paged, resolved", out.stdout), out.stdout
    assert list(tmp_path.iterdir()) == [], "the demo left files in the working directory"


def test_db_upgrade_and_logs_classify_from_an_empty_folder(installed: Path,
                                                           tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _run([str(installed / "sentinel"), "db", "upgrade", "--database", f"sqlite:///{db}"],
         cwd=tmp_path, timeout=60, env=_clean_env())
    assert db.stat().st_size > 0
    out = _run([str(installed / "sentinel"), "logs", "classify", str(CRASH_LOG)],
               cwd=tmp_path, timeout=60, env=_clean_env())
    assert "hbm" in out.stdout.lower() or "oom" in out.stdout.lower(), out.stdout


def test_init_from_an_empty_folder_catches_a_crash(installed: Path, tmp_path: Path) -> None:
    # Issue 53's first hour with the wheel: init, check config, run, a crash caught.
    from init_scenario import environ, init_then_catch_a_crash

    (tmp_path / "work").mkdir()
    init_then_catch_a_crash([str(installed / "sentinel")], tmp_path / "work", environ())


def test_the_wheel_carries_the_examples_unit_and_dashboard(installed: Path,
                                                           tmp_path: Path) -> None:
    _run([str(installed / "sentinel"), "init", "--examples", "deploy"], cwd=tmp_path,
         timeout=60, env=_clean_env())
    for name in ("examples/minimal.yaml", "sentinel.service", "grafana/sentinel.json"):
        assert (tmp_path / "deploy" / name).is_file(), name
