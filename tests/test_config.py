"""Config loading: defaults, env and file secrets, and every error with file:line and key."""

from __future__ import annotations

import getpass
import textwrap
from pathlib import Path

import pytest
import yaml

from sentinel.config import (
    Config,
    ConfigError,
    config_summary,
    load_config,
    parse_config,
)
from sentinel.config.database import load_database_url

EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "sentinel.example.yaml"
HOOK = "https://hooks.example.invalid/services/T0/B0/abcdefghijklmnopqrstuvwx"


def write(tmp_path: Path, text: str, name: str = "sentinel.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def errors(path: Path, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ=env or {})
    lines = str(exc.value).splitlines()
    assert lines == [str(p) for p in exc.value.problems]
    return lines


def test_defaults() -> None:
    c = Config.default()
    assert c.database == "sqlite:///sentinel.db"
    assert c.listen == "127.0.0.1:9465"
    assert c.external_url == "http://127.0.0.1:9465"
    assert (c.evaluation_interval_ms, c.scrape_interval_ms, c.scrape_timeout_ms) == (
        5000, 5000, 4000)
    assert c.retention_ms == 15 * 60_000
    assert c.targets == () and c.receivers == () and c.rule_files is None
    # Unset rule_files: the rules Sentinel ships (issue 36).
    assert [p.name for p in c.rule_paths()] == ["sentinel.yaml", "vllm.yaml"]
    assert c.config_dir == Path.cwd()
    assert c.secrets() == []


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, "# nothing\n"))
    assert c.scrape_interval_ms == 5000
    assert c.config_dir == tmp_path


def test_example_config_loads() -> None:
    env = {"ONCALL_HOOK": HOOK, "ONCALL_TOKEN": "tok-1234567"}
    c = load_config(EXAMPLE, environ=env)
    assert c.targets and c.receivers
    assert c.config_dir == EXAMPLE.parent
    assert any(r.webhook is not None and r.webhook.url == HOOK for r in c.receivers)


def test_full_config_and_inheritance(tmp_path: Path) -> None:
    path = write(tmp_path, """
        database: postgresql://sentinel:${DB_PASS}@db:5432/sentinel
        listen: 0.0.0.0:9999
        external_url: http://sentinel.example:9999/
        evaluation_interval: 10s
        scrape_interval: 15s
        scrape_timeout: 10s
        retention: 1h
        targets:
          - name: a
            url: http://10.0.0.5:8000
            labels: {cluster: v6e-4}
          - name: b
            url: https://10.0.0.6:8000/
            metrics_path: /vllm/metrics
            scrape_interval: 2s
        receivers:
          - name: oncall
            webhook:
              url: ${HOOK}
              timeout: 3s
              send_resolved: false
              headers:
                X-Token: "${TOKEN}"
        """)
    c = load_config(path, environ={"DB_PASS": "pw-secret", "HOOK": HOOK, "TOKEN": "tok-xyz"})
    assert c.external_url == "http://sentinel.example:9999"
    assert (c.evaluation_interval_ms, c.retention_ms) == (10_000, 3_600_000)
    a, b = c.targets
    assert (a.scrape_interval_ms, a.scrape_timeout_ms) == (15_000, 10_000)
    assert a.labels == {"cluster": "v6e-4"}
    assert a.metrics_url == "http://10.0.0.5:8000/metrics"
    # An unset timeout is the global one capped at the target's own interval.
    assert (b.scrape_interval_ms, b.scrape_timeout_ms) == (2_000, 2_000)
    assert b.metrics_url == "https://10.0.0.6:8000/vllm/metrics"
    hook = c.receivers[0].webhook
    assert hook is not None
    assert (hook.url, hook.timeout_ms, hook.send_resolved) == (HOOK, 3000, False)
    assert hook.headers == {"X-Token": "tok-xyz"}
    secrets = c.secrets()
    for s in ("pw-secret", HOOK, "tok-xyz"):
        assert s in secrets


def test_global_timeout_defaults_to_interval_when_shorter(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, "scrape_interval: 2s\n"))
    assert c.scrape_timeout_ms == 2000


def test_url_file_is_read_relative_and_stripped(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "hook").write_text(HOOK + "\n")
    path = write(tmp_path, """
        receivers:
          - name: oncall
            webhook: {url_file: secrets/hook}
        """)
    hook = load_config(path).receivers[0].webhook
    assert hook is not None and hook.url == HOOK
    assert hook.url_file == "secrets/hook"


def test_rule_files_resolve_relative_to_config_dir(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    for name in ("b.yaml", "a.yaml", "a_test.yaml", "signatures.yaml"):
        (tmp_path / "rules" / name).write_text("groups: []\n")
    c = load_config(write(tmp_path, "rule_files: [rules/*.yaml, rules/a.yaml]\n"))
    assert c.rule_paths() == [tmp_path / "rules" / "a.yaml", tmp_path / "rules" / "b.yaml"]


def test_empty_rule_files_means_none_on_purpose(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "rule_files: []\n")).rule_paths() == []


def test_a_glob_matching_no_rule_file_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    # A wheel user's `rules/*.yaml` matched nothing and the daemon started with 0 rules.
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "vllm_test.yaml").write_text("tests: []\n")
    path = write(tmp_path, "targets: []\nrule_files:\n  - rules/*.yaml\n")
    assert errors(path) == [
        f"{path}:3: rule_files[0]: matches no rule file: 'rules/*.yaml' in {tmp_path} "
        "(relative to the config file's folder); omit rule_files to load the bundled rules, "
        "or write rule_files: [] for none"]


def test_relative_sqlite_path_is_under_the_config_folder(tmp_path: Path) -> None:
    # Relative paths in a config mean the config file's folder, whatever the working
    # directory; the built-in default (no `database` key) stays in the working directory.
    conf = tmp_path / "etc"
    conf.mkdir()
    path = write(conf, "database: sqlite:///data/s.db?timeout=5\n")
    assert load_config(path).database == f"sqlite:///{conf}/data/s.db?timeout=5"
    assert load_database_url(path) == f"sqlite:///{conf}/data/s.db?timeout=5"
    for kept in ("sqlite:////abs/s.db", "sqlite://", "sqlite:///:memory:",
                 "postgresql://u@h/db"):
        assert load_config(write(conf, f"database: '{kept}'\n")).database == kept
    bare = write(conf, "listen: 127.0.0.1:9465\n")
    assert load_config(bare).database == "sqlite:///sentinel.db"
    assert load_database_url(bare) == "sqlite:///sentinel.db"


def test_placeholder_tokens_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, """
        api:
          tokens:
            - {name: r, role: read, token: CHANGE-ME-read-token}
        """)
    [line] = errors(path)
    assert line.startswith(f"{path}:3: api.tokens[0].token: is the shipped placeholder")
    assert "openssl rand -hex 32" in line


def test_dollar_dollar_is_a_literal_dollar(tmp_path: Path) -> None:
    path = write(tmp_path, """
        receivers:
          - name: r
            webhook: {url: "http://h/x", headers: {X-A: "a$${B}"}}
        """)
    hook = load_config(path).receivers[0].webhook
    assert hook is not None and hook.headers == {"X-A": "a${B}"}


def test_unknown_key_at_depth_suggests(tmp_path: Path) -> None:
    path = write(tmp_path, """
        targets:
          - name: a
            url: http://h:1
            scrape_intervall: 5s
        """)
    assert errors(path) == [
        f"{path}:4: targets[0].scrape_intervall: unknown key (did you mean scrape_interval?)"]


def test_unknown_top_level_key_lists_choices(tmp_path: Path) -> None:
    path = write(tmp_path, "zzz: 1\n")
    [line] = errors(path)
    assert line.startswith(f"{path}:1: zzz: unknown key (expected one of: database, listen,")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listen: 9465\n", "1: listen: Input should be a valid string"),
        ("listen: localhost\n", "1: listen: expected host:port"),
        ("scrape_interval: 5\n", '1: scrape_interval: not a valid duration: "5"'),
        ("retention: 5 minutes\n", "1: retention: not a valid duration"),
        ("evaluation_interval: 0s\n", "1: evaluation_interval: must be greater than 0"),
        ("scrape_timeout: 10s\n", "1: scrape_timeout: scrape_timeout (10s) must not exceed "
                                  "scrape_interval (5s)"),
        ("database: mysql://x/y\n", "1: database: unsupported database 'mysql'"),
        ("external_url: sentinel:9465\n", "1: external_url: external URL must start with http"),
        ("rule_files: [nope.yaml]\n", "1: rule_files[0]: rule file not found: 'nope.yaml'"),
        ("targets: {a: 1}\n", "1: targets: Input should be a valid tuple"),
        ("targets:\n  - url: http://h:1\n", "2: targets[0].name: required key is missing"),
        ("targets:\n  - name: a b\n    url: http://h:1\n", "2: targets[0].name: String should"),
        ("targets:\n  - name: a\n    url: ftp://h\n",
         "3: targets[0].url: target URL must start with http:// or https://"),
        ("targets:\n  - name: a\n    url: http://\n", "3: targets[0].url: target URL has no host"),
        ("targets:\n  - name: a\n    url: http://h:1\n    metrics_path: metrics\n",
         "4: targets[0].metrics_path: must start with /"),
        ("targets:\n  - name: a\n    url: http://h:1\n    labels:\n      __x: y\n",
         "5: targets[0].labels.__x: label names starting with __ are reserved"),
        ("targets:\n  - name: a\n    url: http://h:1\n    labels:\n      a-b: y\n",
         "5: targets[0].labels.a-b: not a valid label name"),
        ("targets:\n  - name: a\n    url: http://h:1\n    scrape_interval: 1s\n"
         "    scrape_timeout: 2s\n",
         "5: targets[0].scrape_timeout: scrape_timeout (2s) must not exceed scrape_interval (1s)"),
        ("receivers:\n  - name: r\n", "2: receivers[0]: receiver has no kind"),
        ("receivers:\n  - name: r\n    webhook: {}\n",
         "3: receivers[0].webhook.url: url or url_file is required"),
        ("receivers:\n  - name: r\n    webhook:\n      url: http://h/x\n      url_file: f\n",
         "5: receivers[0].webhook.url_file: set either url or url_file, not both"),
        ("receivers:\n  - name: r\n    webhook:\n      url_file: missing\n",
         "4: receivers[0].webhook.url_file: cannot read"),
        ("receivers:\n  - name: r\n    webhook:\n      url: http://h/x\n"
         "      send_resolved: maybe\n",
         "5: receivers[0].webhook.send_resolved: Input should be a valid boolean"),
        ("receivers:\n  - name: r\n    webhook:\n      url: http://h/x\n      headers:\n"
         "        'a b': c\n", "6: receivers[0].webhook.headers.a b: not a valid HTTP header"),
        ("a: 1\na: 2\n", "2: a: duplicate key (first defined on line 1)"),
    ],
)
def test_each_error_kind(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    found = errors(path)
    assert any(line.startswith(f"{path}:{expected}") for line in found), found


def test_duplicate_names(tmp_path: Path) -> None:
    path = write(tmp_path, """
        targets:
          - {name: a, url: "http://h:1"}
          - {name: b, url: "http://h:2"}
          - {name: a, url: "http://h:3"}
        receivers:
          - {name: r, webhook: {url: "http://h/x"}}
          - {name: r, webhook: {url: "http://h/y"}}
        """)
    assert errors(path) == [
        f"{path}:4: targets[2].name: duplicate name 'a' (also targets[0])",
        f"{path}:7: receivers[1].name: duplicate name 'r' (also receivers[0])",
    ]


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: 127.0.0.1:1\ntargets: [\n  {name: a\nreceivers: []\n")
    [line] = errors(path)
    assert line.startswith(f"{path}:4: YAML syntax error:")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    assert errors(path) == [f"{path}:1: the file must hold a YAML mapping"]


def test_missing_env_var_names_variable_not_value(tmp_path: Path) -> None:
    path = write(tmp_path, """
        receivers:
          - name: r
            webhook:
              url: ${HOOK}
              headers: {X-Token: "${PRESENT}/${ABSENT}"}
        """)
    found = errors(path, env={"HOOK": HOOK, "PRESENT": "present-secret-value"})
    assert found == [
        f"{path}:5: receivers[0].webhook.headers.X-Token: environment variable ABSENT is not set: "
        "set it where Sentinel starts (systemd: EnvironmentFile=/etc/sentinel/sentinel.env; "
        "docker: -e ABSENT; Kubernetes: the Secret)"]
    assert "present-secret-value" not in "\n".join(found)


def test_errors_never_echo_expanded_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, """
        receivers:
          - name: r
            webhook: {url: "${HOOK}"}
        """)
    found = errors(path, env={"HOOK": "gopher://secret-host-name/token-abcdef"})
    assert found == [f"{path}:3: receivers[0].webhook.url: webhook URL must start with "
                     "http:// or https://"]
    assert "token-abcdef" not in "\n".join(found)


def test_many_errors_at_once_sorted_by_line(tmp_path: Path) -> None:
    path = write(tmp_path, """
        listen: nowhere
        scrape_interval: fast
        targets:
          - name: a
            url: ftp://x
            scrape_timeout: 1m
          - name: a
            url: http://h:1
            colour: blue
        receivers:
          - name: r
            webhook: {url: "${NOPE}"}
          - name: s
        """)
    assert errors(path) == [
        f"{path}:1: listen: expected host:port, e.g. 127.0.0.1:9465",
        f'{path}:2: scrape_interval: not a valid duration: "fast" (use e.g. 30s, 5m, 1h30m)',
        f"{path}:5: targets[0].url: target URL must start with http:// or https://",
        f"{path}:6: targets[0].scrape_timeout: scrape_timeout (1m) must not exceed "
        "scrape_interval (5s)",
        f"{path}:7: targets[1].name: duplicate name 'a' (also targets[0])",
        f"{path}:9: targets[1].colour: unknown key (expected one of: name, url, metrics_path, "
        "scrape_interval, scrape_timeout, labels, logs, tpu, xla_cache_path, accelerator, "
        "sample_limit, label_limit, probe, authorization, basic_auth, tls_config, proxy_url)",
        f"{path}:12: receivers[0].webhook.url: environment variable NOPE is not set: set it "
        "where Sentinel starts (systemd: EnvironmentFile=/etc/sentinel/sentinel.env; docker: "
        "-e NOPE; Kubernetes: the Secret)",
        f"{path}:13: receivers[1]: receiver has no kind: add one of webhook, slack, pagerduty, "
            "alertmanager",
    ]


def test_parse_config_without_lines() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"targets": [{"name": "a"}]}, source="inline")
    assert str(exc.value) == "inline: targets[0].url: required key is missing"


def test_config_is_frozen() -> None:
    c = Config.default()
    with pytest.raises(ValueError, match="frozen"):
        c.listen = "x:1"  # type: ignore[misc]


def test_summary_redacts_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, """
        database: postgresql://sentinel:db-pass-123@db/sentinel
        targets: [{name: a, url: "http://h:1"}]
        receivers:
          - name: r
            webhook:
              url: https://hooks.example.invalid/services/tok-abcdef?key=k-123456
              headers: {Authorization: "Bearer bearer-xyz-789"}
        """)
    c = load_config(path)
    text = config_summary(c)
    for secret in ("db-pass-123", "tok-abcdef", "k-123456", "bearer-xyz-789"):
        assert secret not in text
        assert secret not in repr(c)
    assert "url: https://hooks.example.invalid/<redacted>" in text
    assert "scrape_timeout: 4s" in text and "name: a" in text


def test_summary_shows_every_section_with_its_secrets_redacted(tmp_path: Path) -> None:
    (tmp_path / "model.key").write_text("sk-model-key-31337\n")
    path = write(tmp_path, """
        targets:
          - name: a
            url: "http://h:1"
            logs: {files: [/var/log/vllm.log]}
        diagnosis:
          endpoints: [{name: m, url: "http://127.0.0.1:8001", api_key_file: model.key}]
        receivers:
          - name: r
            webhook: {url: "http://127.0.0.1:9/hook", hmac_secret: hmac-s3cr3t-42}
        notify: {watchdog: true, route: {receiver: r, repeat_interval: 1m}}
        remediation:
          policies:
            - name: p
              alerts: [X]
              steps: [{docker_restart: {container: "vllm-{target}"}}]
        """)
    text = config_summary(load_config(path))
    doc = yaml.safe_load(text)
    for section in ("diagnosis", "notify", "remediation", "targets", "receivers"):
        assert doc[section], section
    assert doc["targets"][0]["logs"]["files"] == ["/var/log/vllm.log"]
    assert doc["notify"]["route"]["repeat_interval"] == "1m"
    assert doc["remediation"]["policies"][0]["alerts"] == ["X"]
    assert doc["diagnosis"]["endpoints"][0]["api_key"] == "<redacted>"
    for secret in ("sk-model-key-31337", "hmac-s3cr3t-42"):
        assert secret not in text


def test_diagnosis_endpoint_errors_name_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, """\
targets:
  - name: a
    url: http://127.0.0.1:8000
diagnosis:
  endpoints:
    - name: m
      url: http://127.0.0.1:8001
      api_key_file: missing.key
""")
    assert errors(path) == [
        f"{path}:8: diagnosis.endpoints[0].api_key_file: cannot read "
        f"{tmp_path / 'missing.key'} as user {getpass.getuser()}: No such file or directory: "
        "create it, or fix the path (a relative path starts at the config file's folder)"]
    (tmp_path / "model.key").write_text("sk-test-key\n")
    path.write_text(path.read_text().replace("missing.key", "model.key\n      tymeout: 5s"))
    # A typo beside a readable key file is reported, with nothing else.
    assert errors(path) == [f"{path}:9: diagnosis.endpoints[0].tymeout: unknown key "
                            "(did you mean timeout?)"]
    path.write_text(path.read_text().replace("tymeout: 5s", "target: b"))
    assert errors(path) == [f"{path}:9: diagnosis.endpoints[0].target: no target named 'b' "
                            "(targets: a)"]
    path.write_text(path.read_text().replace("target: b", "target: a"))
    config = load_config(path)
    assert config.diagnosis is not None and config.diagnosis.endpoints[0].api_key == "sk-test-key"
    assert "sk-test-key" in config.secrets()
