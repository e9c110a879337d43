"""`check config` reads what `run` reads (issue 53): TLS files, rule metric names, the network.

Each case is what passed `check config` before and then tripped `run`: a CA file that
is not a certificate, a model URL where nothing listens, a misspelt vLLM metric, an
authenticated target under `--scrape`. Real files, real loopback servers, the real
command; each finding names the file, line and key and says the fix, with the exit
code docs/reference/exit-codes.md gives.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from fixtures_ports import free_port
from test_preflight import QUIET, refusal
from test_scrape_client import PAGE, TOKEN, _Server, _tls_server, pki  # noqa: F401 (fixture)

from sentinel import exitcodes
from sentinel.checks import check_config
from sentinel.collect.scrape import Scraper
from sentinel.collect.tlssettings import TLSSettings, tls_problem
from sentinel.config import load_config
from sentinel.daemon.scrapetarget import scrape_target
from sentinel.sim.server import start_sim
from sentinel.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parent.parent


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel", "check", "config", *args],
                          capture_output=True, text=True, timeout=90,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})})


def _not_a_cert(tmp_path: Path) -> Path:
    bad = tmp_path / "ca.pem"
    bad.write_text("this is the CA's fingerprint, not its certificate\n")
    return bad


def test_a_ca_file_that_is_not_a_certificate_is_refused_by_both_commands(tmp_path):
    _not_a_cert(tmp_path)
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + f"database: sqlite:///{tmp_path}/s.db\ntargets:\n"
                   "  - name: a\n    url: https://127.0.0.1:9\n"
                   "    tls_config:\n      ca_file: ca.pem\n")
    code, errors = refusal(cfg)
    assert code == exitcodes.CONFIG
    assert len(errors) == 1, errors
    line = errors[0]
    assert line.startswith(f"error: {cfg}:8: targets[0].tls_config.ca_file: "), line
    assert "-----BEGIN CERTIFICATE-----" in line and str(tmp_path / "ca.pem") in line


def test_an_inherited_tls_config_is_placed_at_the_top_level_key(tmp_path):
    _not_a_cert(tmp_path)
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "tls_config:\n  ca_file: ca.pem\ntargets:\n"
                   "  - {name: a, url: 'https://127.0.0.1:9'}\n")
    out = _check("--offline", str(cfg))
    assert out.returncode == exitcodes.CONFIG, out.stderr
    assert f"error: {cfg}:4: targets[0].tls_config.ca_file: " in out.stderr


def test_run_names_a_bad_ca_once_instead_of_a_traceback_every_scrape(tmp_path, caplog):
    """A file that went bad after the check (or a reload): a scrape error, said once."""
    settings = TLSSettings(ca_file=str(_not_a_cert(tmp_path)))
    assert tls_problem(settings) is not None
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + "targets:\n  - {name: a, url: 'https://127.0.0.1:9'}\n")
    target = scrape_target(load_config(str(cfg)).targets[0])
    from dataclasses import replace

    target = replace(target, tls=settings)
    scraper = Scraper(MemoryStore(retention_ms=60_000))
    caplog.set_level(logging.DEBUG)
    try:
        results = [scraper.scrape(target, 1_000 * (i + 1)) for i in range(3)]
    finally:
        scraper.close()
    assert all(not r.up for r in results)
    assert "tls_config.ca_file" in (results[0].error or "")
    said = [r for r in caplog.records if "tls_config.ca_file" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, said
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_network_names_a_dead_model_url_and_receiver(tmp_path):
    dead_model, dead_hook = free_port(), free_port()
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + f"database: sqlite:///{tmp_path}/s.db\n"
                   "diagnosis:\n  endpoints:\n"
                   f"    - name: m\n      url: http://127.0.0.1:{dead_model}\n"
                   "receivers:\n"
                   f"  - name: hook\n    webhook:\n      url: http://127.0.0.1:{dead_hook}/t0k3n\n")
    # Without --network nothing is reached: the file itself is fine.
    assert _check(str(cfg)).returncode == exitcodes.OK
    out = _check("--network", str(cfg))
    assert out.returncode == exitcodes.UNAVAILABLE, out.stderr
    assert (f"error: {cfg}:7: diagnosis.endpoints[0].url: http://127.0.0.1:{dead_model}"
            "/v1/models: no answer") in out.stderr
    assert f"error: {cfg}:11: receivers[0].webhook.url: http://127.0.0.1:{dead_hook}: " \
           "cannot connect" in out.stderr
    assert "t0k3n" not in out.stderr  # a webhook URL's path is its secret


def test_network_passes_a_live_model_endpoint(tmp_path):
    sim = start_sim(auto_traffic=False)
    try:
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET + f"database: sqlite:///{tmp_path}/s.db\n"
                       f"diagnosis:\n  endpoints:\n    - {{name: m, url: '{sim.url}'}}\n")
        out = _check("--network", str(cfg))
        assert out.returncode == exitcodes.OK, out.stderr
    finally:
        sim.stop()


def _behind_proxy(tmp_path: Path, model_port: int, hook_port: int) -> Path:
    """A model endpoint and a webhook named by hosts only the proxy reaches (.invalid)."""
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(QUIET + f"database: sqlite:///{tmp_path}/s.db\n"
                   "diagnosis:\n  endpoints:\n"
                   f"    - name: m\n      url: http://model.invalid:{model_port}\n"
                   "receivers:\n"
                   f"  - name: hook\n    webhook:\n      url: http://hook.invalid:{hook_port}/t0k3n\n")
    return cfg


def test_network_goes_through_the_environments_proxy_as_run_does(tmp_path):
    """Issue 53: `--network` reached endpoints directly while run's httpx clients went
    through HTTP_PROXY: false failures behind a proxy, false successes past a dead one."""
    from fakes.forward_proxy import ForwardProxy

    sim = start_sim(auto_traffic=False)
    proxy = ForwardProxy().start()
    port = int(sim.url.rsplit(":", 1)[1])
    cfg = _behind_proxy(tmp_path, port, port)
    try:
        out = _check("--network", str(cfg), env={"HTTP_PROXY": proxy.url})
        assert out.returncode == exitcodes.OK, out.stderr
        assert ("GET", f"http://model.invalid:{port}/v1/models") in proxy.seen
        assert ("HEAD", f"http://hook.invalid:{port}/") in proxy.seen  # origin only
        assert not [u for _, u in proxy.seen if "t0k3n" in u]  # the secret path is not sent
        # Without the proxy the names resolve nowhere: what run would meet too.
        direct = _check("--network", str(cfg))
        assert direct.returncode == exitcodes.UNAVAILABLE, direct.stderr
        assert "through the proxy" not in direct.stderr
        # NO_PROXY wins over HTTP_PROXY, as in httpx.
        bypass = _check("--network", str(cfg),
                        env={"HTTP_PROXY": proxy.url, "NO_PROXY": "model.invalid"})
        assert bypass.returncode == exitcodes.UNAVAILABLE, bypass.stderr
        assert f"diagnosis.endpoints[0].url: http://model.invalid:{port}/v1/models: " \
               "no answer" in bypass.stderr
        assert "receivers[0]" not in bypass.stderr
    finally:
        proxy.stop()
        sim.stop()


def test_network_names_the_proxy_when_it_or_what_lies_behind_it_is_down(tmp_path):
    from fakes.forward_proxy import ForwardProxy

    dead = free_port()
    cfg = _behind_proxy(tmp_path, dead, dead)
    proxy = ForwardProxy().start()
    try:  # the proxy answers 502: the endpoints behind it are away
        out = _check("--network", str(cfg), env={"HTTP_PROXY": f"http://u:pw@{proxy.url[7:]}"})
    finally:
        proxy.stop()
    assert out.returncode == exitcodes.UNAVAILABLE, out.stderr
    assert (f"{cfg}:7: diagnosis.endpoints[0].url: http://model.invalid:{dead}/v1/models "
            f"(through the proxy {proxy.url}): HTTP 502: the proxy could not reach it"
            ) in out.stderr
    assert (f"{cfg}:11: receivers[0].webhook.url: http://hook.invalid:{dead} (through the "
            f"proxy {proxy.url}): HTTP 502: the proxy could not reach it") in out.stderr
    assert "pw" not in out.stderr and "t0k3n" not in out.stderr
    gone = _check("--network", str(cfg), env={"http_proxy": f"http://127.0.0.1:{dead}"})
    assert gone.returncode == exitcodes.UNAVAILABLE, gone.stderr
    assert f"(through the proxy http://127.0.0.1:{dead}): no answer" in gone.stderr
    assert f"(through the proxy http://127.0.0.1:{dead}): cannot connect" in gone.stderr


def test_runs_model_client_goes_the_same_way(tmp_path, monkeypatch):
    """What the pre-flight follows is what run's ModelClient follows: the environment."""
    from fakes.forward_proxy import ForwardProxy

    from sentinel.config.diagnosis import ModelEndpointConfig
    from sentinel.respond.diagnose.client import ModelClient

    sim = start_sim(auto_traffic=False)
    proxy = ForwardProxy().start()
    port = int(sim.url.rsplit(":", 1)[1])
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    client = ModelClient(ModelEndpointConfig.model_validate(
        {"name": "m", "url": f"http://model.invalid:{port}"}))
    try:
        assert client.models()
        assert ("GET", f"http://model.invalid:{port}/v1/models") in proxy.seen
    finally:
        client.close()
        proxy.stop()
        sim.stop()


def _rules(tmp_path: Path, metric: str) -> Path:
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups:\n  - name: mine\n    rules:\n"
                     "      - alert: Queued\n"
                     f"        expr: sum({metric}) > 10\n")
    return rules


def test_a_misspelt_vllm_metric_is_named_with_a_suggestion_without_scraping(tmp_path):
    rules = _rules(tmp_path, "vllm:num_request_waiting")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"listen: 127.0.0.1:0\ndatabase: sqlite:///{tmp_path}/s.db\n"
                   f"rule_files: [{rules}]\n")
    out = _check(str(cfg))
    assert out.returncode == exitcodes.OK, out.stderr  # a warning: vLLM may be newer
    want = (f"warning: {rules}:4: rule mine/Queued selects vllm:num_request_waiting, which "
            "is not a metric vLLM exposes: did you mean vllm:num_requests_waiting?")
    assert want in out.stderr, out.stderr
    strict = _check("--strict", str(cfg))
    assert strict.returncode == exitcodes.CONFIG
    assert want.replace("warning: ", "error: ") in strict.stderr


def test_the_shipped_rules_select_only_known_vllm_metrics(tmp_path):
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"listen: 127.0.0.1:0\ndatabase: sqlite:///{tmp_path}/s.db\n")
    out = _check(str(cfg))
    assert out.returncode == exitcodes.OK, out.stderr
    assert "not a metric vLLM exposes" not in out.stderr


def test_scrape_suggests_the_name_a_target_exposes(tmp_path, capsys):
    sim = start_sim(auto_traffic=False)
    try:
        rules = _rules(tmp_path, "vllm:num_request_running")
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET.replace("rule_files: []", f"rule_files: [{rules}]")
                       + f"targets:\n  - {{name: a, url: '{sim.url}'}}\n")
        assert check_config(str(cfg), sys.stdout, sys.stderr, scrape=True, offline=True) == 1
        assert ("BLIND: rule Queued selects vllm:num_request_running, which no target "
                "exposes: did you mean vllm:num_requests_running?") in capsys.readouterr().err
    finally:
        sim.stop()


def test_scrape_sends_the_targets_authorization(tmp_path, capsys):
    server = _Server(auth=f"Bearer {TOKEN}")
    try:
        (tmp_path / "token").write_text(TOKEN + "\n")
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET + f"targets:\n  - name: a\n    url: '{server.url}'\n"
                       "    authorization: {credentials_file: token}\n")
        assert check_config(str(cfg), sys.stdout, sys.stderr, scrape=True, offline=True) == 0
        captured = capsys.readouterr()
        samples = PAGE.count(b"\n") - PAGE.count(b"# ")
        assert f"scraped a: {samples} samples" in captured.out, captured
        assert server.seen and server.seen[0][1].get("Authorization") == f"Bearer {TOKEN}"
        assert TOKEN not in captured.out + captured.err
    finally:
        server.stop()


def test_scrape_trusts_the_targets_private_ca(tmp_path, pki, capsys):  # noqa: F811
    """A private-CA target: a false failure before (the scrape ignored tls_config)."""
    server = _tls_server(pki)
    try:
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET + f"targets:\n  - name: a\n    url: '{server.url}'\n"
                       f"    tls_config: {{ca_file: '{pki['ca']}', "
                       "server_name: metrics.internal}\n")
        assert check_config(str(cfg), sys.stdout, sys.stderr, scrape=True, offline=True) == 0
        assert "scraped a:" in capsys.readouterr().out
    finally:
        server.stop()


def test_scrape_goes_through_the_targets_proxy(tmp_path, capsys):
    """Behind a proxy: a false success before (the scrape went direct, or nowhere)."""
    proxy = _Server()  # answers the page itself: what matters is that it was asked
    try:
        cfg = tmp_path / "sentinel.yaml"
        cfg.write_text(QUIET + "targets:\n  - name: a\n    url: 'http://vllm-7.internal:8000'\n"
                       f"    proxy_url: '{proxy.url}'\n")
        assert check_config(str(cfg), sys.stdout, sys.stderr, scrape=True, offline=True) == 0
        assert [line for line, _ in proxy.seen] == [
            "GET http://vllm-7.internal:8000/metrics HTTP/1.1"]
    finally:
        proxy.stop()
