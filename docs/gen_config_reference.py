"""Write docs/reference/configuration.md from the configuration model itself.

    python docs/gen_config_reference.py          # rewrite the page
    python docs/gen_config_reference.py --check  # exit 1 when the page is out of date

Every key `sentinel.config.Config` accepts, with its type, default and
description, walked from the pydantic models in `sentinel/config/`, so the page
cannot drift from the code (tests/test_docs_config_reference.py fails when the
committed page differs from what this script writes). A description is the
field's `description=` when it has one, else the comment beside or above the
field in its class, else the docstring of the section's model; a section's
example is the YAML block in its module's docstring.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sentinel.config import Config  # noqa: E402
from sentinel.config.durations import format_duration  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "configuration.md"

# Defaults the model derives from other keys (sentinel.config.model.inherit_defaults).
DERIVED = {
    "external_url": "`http://<listen host>:<port>` (the machine's name for 0.0.0.0)",
    "scrape_timeout": "`4s`, capped at `scrape_interval`",
    "targets[].scrape_interval": "the global `scrape_interval`",
    "targets[].scrape_timeout": "the global `scrape_timeout`, capped at the target's interval",
}

# Keys whose models carry no description, comment or commented example. A key here
# that the model no longer has fails tests/test_docs_config_reference.py.
_K8S_API = {
    "api_server": "The API's plain URL (e.g. `kubectl proxy`'s), no credentials; "
                  "not with `kubeconfig`/`context`.",
    "kubeconfig": "A kubeconfig file; neither this nor `api_server`: the pod's service "
                  "account in a cluster, else `~/.kube/config`.",
    "context": "The kubeconfig context to use; default: its current context.",
}
_STEP = "remediation.policies[].steps[]."
EXTRA: dict[str, str] = {
    "scrape_timeout": "Default scrape timeout for targets; at most `scrape_interval`.",
    "targets[].logs.cloud_logging.project": "The Google Cloud project whose logs are read.",
    "targets[].tpu.project": "The Google Cloud project of the TPU node.",
    "targets[].tpu.zone": "The node's zone, e.g. `southamerica-west1-a`.",
    "targets[].tpu.node": "The TPU node's name.",
    **{f"kubernetes_sd[].api.{k}": v for k, v in _K8S_API.items()},
    **{f"{_STEP}kubernetes_pod_restart.api.{k}": v for k, v in _K8S_API.items()},
    **{f"{_STEP}kubernetes_rollout_restart.api.{k}": v for k, v in _K8S_API.items()},
    "kubernetes_sd[].label_selector": "Pods matching this label selector (Kubernetes syntax) "
                                      "become targets.",
    "kubernetes_sd[].field_selector": "An optional field selector, e.g. `spec.nodeName=n1`.",
    "kubernetes_sd[].scheme": "`http` or `https` for the pod's URL.",
    "kubernetes_sd[].metrics_path": "The path scraped on each pod.",
    "kubernetes_sd[].pod_labels": "Copy the pod's labels onto its series "
                                  "(`app.kubernetes.io/name` becomes `app_kubernetes_io_name`).",
    "kubernetes_sd[].scrape_timeout": "Unset: the global `scrape_timeout`.",
    "kubernetes_sd[].xla_cache_path": "The XLA cache path, where Sentinel can read it, for "
                                      "every discovered target.",
    "kubernetes_sd[].backoff_initial": "First wait after a failed list or watch; doubles, "
                                       "jittered.",
    "kubernetes_sd[].backoff_max": "The longest wait between retries of the API.",
    "receivers[].name": "Unique; routes, `fallback_receiver` and the timeline name it.",
    "receivers[].webhook.url_file": "Read `url` from this file instead (relative to the "
                                    "config file).",
    "receivers[].webhook.hmac_secret_file": "Read `hmac_secret` from this file instead.",
    "receivers[].webhook.signature_header": "The header carrying `sha256=<hex HMAC-SHA256 of "
                                            "the body>` when `hmac_secret` is set.",
    "receivers[].slack.timeout": "One request's deadline.",
    "receivers[].slack.send_resolved": "Also notify when the incident resolves. A \"fixed "
                                       "by Sentinel\" notice is sent either way.",
    "receivers[].webhook.send_resolved": "Also notify when the incident resolves. A \"fixed "
                                         "by Sentinel\" notice is sent either way.",
    "receivers[].slack.url_file": "Read `url` from this file instead.",
    "receivers[].pagerduty.timeout": "One request's deadline.",
    "receivers[].pagerduty.send_resolved": "Resolve the PagerDuty incident when Sentinel's "
                                           "resolves.",
    "receivers[].pagerduty.routing_key_file": "Read `routing_key` (the Events API v2 "
                                              "integration key) from this file.",
    "receivers[].pagerduty.url": "The Events API v2 endpoint.",
    "receivers[].pagerduty.default_severity": "PagerDuty severity for an alert whose "
                                              "`severity` label `severity_map` lacks.",
    "receivers[].alertmanager.timeout": "One request's deadline.",
    "receivers[].alertmanager.send_resolved": "Also push the resolved alert.",
    "receivers[].alertmanager.resend_interval": (
        "Re-send firing alerts this often, with endsAt four intervals ahead (as Prometheus's "
        "notifier does), so Alertmanager never expires an alert Sentinel still has firing."),
    "diagnosis.endpoints[].name": "Unique name of the endpoint (on the runbook event).",
    "diagnosis.endpoints[].model": "The model to ask; default: the first id of `/v1/models`.",
    "diagnosis.endpoints[].target": "The Sentinel target this endpoint is (never asked about "
                                    "its own crash); default: the target with the same "
                                    "host:port.",
    "diagnosis.endpoints[].api_key_file": "Read `api_key` (vLLM's `--api-key`) from this file.",
    "diagnosis.structured_output": "How the JSON runbook is asked for: `auto` finds the "
                                   "server's form (and remembers it); or one of OpenAI's "
                                   "`response_format`, `json_object_schema` (llama.cpp), "
                                   "`json_object_value` (TGI), `structured_outputs` "
                                   "(vLLM >= 0.10.2), `guided_json` (vLLM < 0.12), "
                                   "`json_object`, `none`.",
    "diagnosis.temperature": "Sampling temperature of the request.",
    "notify.route.matchers": "Alertmanager matchers (`label=\"v\"`, `!=`, `=~`, `!~`) an alert "
                             "must all match to take this route.",
    "notify.route.continue": "After a match, go on to the next sibling route too.",
    "authorization": "Default for every target (a target's own key wins; the two auth keys go as a pair): an `Authorization: <type> <credentials>` header on each scrape (Prometheus's key).",
    "authorization.type": "The scheme, `Bearer` by default.",
    "authorization.credentials": "The token (usually `${VAR}`); secret, redacted.",
    "authorization.credentials_file": "Read `credentials` from this file (relative to the config's folder).",
    "basic_auth": "Default for every target (a target's own key wins; the two auth keys go as a pair): HTTP basic auth on each scrape; not with `authorization`.",
    "basic_auth.username": "The user name.",
    "basic_auth.password": "The password (usually `${VAR}`); secret, redacted.",
    "basic_auth.password_file": "Read `password` from this file (relative to the config's folder).",
    "tls_config": "Default for every target (a target's own key wins; the two auth keys go as a pair): how an https target's certificate is checked (Prometheus's key).",
    "tls_config.ca_file": "CA certificates to trust instead of the system's (relative to the config's folder; must be readable).",
    "tls_config.cert_file": "A client certificate to show (with `key_file`).",
    "tls_config.key_file": "The client certificate's key (with `cert_file`).",
    "tls_config.server_name": "The name the server's certificate must carry (SNI), when not the URL's host.",
    "tls_config.insecure_skip_verify": "Accept any certificate (testing only).",
    "proxy_url": "Default for every target (a target's own key wins; the two auth keys go as a pair): an http:// proxy the scrape goes through (absolute-form requests; an https target through a proxy is refused for now).",
    "targets[].authorization": "an `Authorization: <type> <credentials>` header on each scrape (Prometheus's key).",
    "targets[].authorization.type": "The scheme, `Bearer` by default.",
    "targets[].authorization.credentials": "The token (usually `${VAR}`); secret, redacted.",
    "targets[].authorization.credentials_file": "Read `credentials` from this file (relative to the config's folder).",
    "targets[].basic_auth": "HTTP basic auth on each scrape; not with `authorization`.",
    "targets[].basic_auth.username": "The user name.",
    "targets[].basic_auth.password": "The password (usually `${VAR}`); secret, redacted.",
    "targets[].basic_auth.password_file": "Read `password` from this file (relative to the config's folder).",
    "targets[].tls_config": "how an https target's certificate is checked (Prometheus's key).",
    "targets[].tls_config.ca_file": "CA certificates to trust instead of the system's (relative to the config's folder; must be readable).",
    "targets[].tls_config.cert_file": "A client certificate to show (with `key_file`).",
    "targets[].tls_config.key_file": "The client certificate's key (with `cert_file`).",
    "targets[].tls_config.server_name": "The name the server's certificate must carry (SNI), when not the URL's host.",
    "targets[].tls_config.insecure_skip_verify": "Accept any certificate (testing only).",
    "targets[].proxy_url": "an http:// proxy the scrape goes through (absolute-form requests; an https target through a proxy is refused for now).",
    "notify.route.mute_time_intervals": "Names from the top-level `time_intervals`: the route "
                                        "sends nothing while one is active and sends what it "
                                        "held at the first flush after (not inherited; not "
                                        "on the root route, as in Alertmanager).",
    "notify.route.active_time_intervals": "Names from the top-level `time_intervals`: the route "
                                          "sends only while one of them is active.",
    "notify.inhibit_rules[].source_matchers": "While an alert matching these fires...",
    "notify.inhibit_rules[].target_matchers": "...alerts matching these are muted...",
    "notify.inhibit_rules[].equal": "...when these labels have equal values on both.",
    "remediation.backoff.initial": "Wait after a failed attempt, doubling each time.",
    "remediation.backoff.max": "The longest wait.",
    "remediation.backoff.reset_after": "A target without failures this long starts again at "
                                       "`initial`.",
    "remediation.silences[].matchers": "Label values an alert must all have.",
    "remediation.silences[].starts": "Start, RFC 3339 with a time zone (a one-off window).",
    "remediation.silences[].ends": "End, RFC 3339 with a time zone; after `starts`.",
    "remediation.silences[].comment": "Why (on the incident timeline).",
    "remediation.silences[].time_intervals": "Instead of `starts`/`ends`: names from the "
                                             "top-level `time_intervals`; the silence holds "
                                             "while one of them is active (a recurring window).",
    "time_intervals[].name": "The name routes (`mute_time_intervals`, "
                             "`active_time_intervals`) and remediation silences refer to.",
    "time_intervals[].time_intervals": "Alertmanager's syntax: each entry has `times` "
                                       "(`start_time`/`end_time`, HH:MM, end excluded), "
                                       "`weekdays`, `days_of_month` (negative from the "
                                       "month's end), `months`, `years` (ranges `a:b`, "
                                       "inclusive) and `location` (IANA zone, default "
                                       "UTC); all given fields must match, any entry may.",
    "remediation.policies[].name": "Unique; in decisions, metrics and the timeline.",
    "remediation.policies[].alerts": "Alert names this policy acts on.",
    "remediation.policies[].dry_run": "Decide and record, never act (this policy only).",
    "remediation.policies[].max_per_hour": "Attempts per target per hour, at most.",
    f"{_STEP}docker_restart.socket": "The Docker Engine API's unix socket.",
    f"{_STEP}docker_restart.stop_timeout": "Docker's stop timeout before it kills the "
                                           "container.",
    f"{_STEP}systemd_restart.unit": "The unit to restart (a `{label}` template).",
    f"{_STEP}systemd_restart.systemctl": "The `systemctl` executable.",
    f"{_STEP}command.argv": "The argv template; `argv[0]` must be in "
                            "`remediation.command_allowlist`; `{label}` placeholders.",
    f"{_STEP}tpu_node_restart.operation_timeout": "How long the stop and start operations may "
                                                  "take.",
    f"{_STEP}xla_cache_backup.direction": "`backup` (cache to durable) or `restore`.",
    f"{_STEP}xla_cache_backup.durable": "The durable copy's path.",
    f"{_STEP}kubernetes_pod_restart.namespace": "The pod's namespace (a `{label}` template).",
    f"{_STEP}kubernetes_pod_restart.pod": "The pod to delete (a `{label}` template).",
    f"{_STEP}kubernetes_pod_restart.grace_period": "The deletion's grace period; unset: the "
                                                   "pod's own.",
    f"{_STEP}kubernetes_rollout_restart.namespace": "The workload's namespace.",
    f"{_STEP}kubernetes_rollout_restart.kind": "`Deployment` or `StatefulSet`.",
    f"{_STEP}kubernetes_rollout_restart.pod": "The alert's pod, to find the workload from "
                                              "its owners when `name` is unset.",
    f"{_STEP}kubernetes_rollout_restart.container": "The container whose "
                                                    "`VLLM_XLA_CACHE_PATH` is checked.",
    f"{_STEP}timeout": "How long the action may take.",
    f"{_STEP}verify": "Check `/health` and a one-token completion afterwards.",
    f"{_STEP}attempts": "Attempts of this step before the next step.",
    "api.tokens[].token_file": "Read `token` from this file instead.",
    "alert_restore.for_grace_period": "Prometheus's `--rules.alert.for-grace-period`: a "
                                      "restored pending alert waits at least this long.",
    "alert_restore.for_outage_tolerance": "Prometheus's `--rules.alert.for-outage-tolerance`: "
                                          "after a longer outage `for` starts again.",
    "query_backend.url": "The API root of Prometheus, Thanos, Mimir, VictoriaMetrics or "
                         "Managed Service for Prometheus; `/api/v1/query` is appended.",
    "query_backend.bearer_token_file": "A bearer token, re-read on every request (rotation).",
    "query_backend.basic_auth.username": "The basic-auth user.",
    "query_backend.basic_auth.password_file": "The basic-auth password's file.",
    "query_backend.timeout": "One query, retries included.",
    "query_backend.scrape": "Also scrape the targets into the embedded store (diagnosis "
                            "evidence, the missing-metric check).",
    "ha.lease": "How long a leader's lease lasts without renewal; renewed every third.",
    "ha.name": "Sentinels that share this name on one database elect one leader.",
}

HEADER = """\
# Configuration reference

<!-- Generated by docs/gen_config_reference.py from sentinel/config/: do not edit by hand. -->

Every key of `sentinel.yaml`, walked from the configuration model itself
(`sentinel/config/`). `[]` in a key marks a list: `targets[].name` is the
`name` of each entry of `targets`. Durations are Prometheus durations
(`500ms`, `5s`, `1m30s`, `1h`, `7d`); unknown keys are errors. Any string may
use `${VAR}` (the environment variable, an error when unset; `$$` for a
literal `$`); `*_file` keys read a secret from a file, relative to the config
file's folder. How the file is read and checked:
[How configuration works](../concepts/configuration.md). Complete examples:
[Example configurations](examples.md).
"""


@dataclass(frozen=True)
class Row:
    """One key of the reference."""

    key: str
    type: str
    default: str
    description: str


def rows(model: type[BaseModel] = Config, prefix: str = "",
         above: tuple[type[BaseModel], ...] = (), describe: bool = True) -> Iterator[Row]:
    """Every key below `model`, depth first, in the model's field order.

    A model that nests itself (a route's `routes`) is listed once: the nested
    key says it takes the same keys as its parent.
    """
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        ann = field.annotation
        inner, is_list = _element(ann)
        description = _description(key, model, name, field, inner) if describe else ""
        recursive = inner in (*above, model)
        if recursive:
            description = (description + " " if description else "") + \
                f"Each entry takes the same keys as `{prefix.rstrip('.')}`."
        yield Row(key, _type_name(name, ann), _default(key, name, field), description)
        if isinstance(inner, type) and issubclass(inner, BaseModel) and not recursive:
            yield from rows(inner, key + ("[]." if is_list else "."), (*above, model), describe)


def _element(ann: Any) -> tuple[Any, bool]:
    """The model (or type) a field holds, and whether it holds a list of them."""
    ann = _unwrap_optional(ann)
    if get_origin(ann) in (tuple, list):
        return _unwrap_optional(get_args(ann)[0]), True
    return ann, False


def _unwrap_optional(ann: Any) -> Any:
    if get_origin(ann) in (Union, types.UnionType):
        rest = [a for a in get_args(ann) if a is not type(None)]
        return rest[0] if len(rest) == 1 else ann
    return ann


def _type_name(name: str, ann: Any) -> str:
    if name.endswith("_ms"):
        return "duration"
    optional = get_origin(ann) in (Union, types.UnionType) and type(None) in get_args(ann)
    ann = _unwrap_optional(ann)
    origin = get_origin(ann)
    if origin in (tuple, list):
        text = f"list of {_type_name('', get_args(ann)[0])}"
    elif origin is dict:
        key, value = get_args(ann)
        text = f"map of {_type_name('', key)} to {_type_name('', value)}"
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        text = "section"
    elif get_origin(ann) is Literal:
        text = "one of " + ", ".join(f"`{a}`" for a in get_args(ann))
    elif get_origin(ann) in (Union, types.UnionType):
        text = " or ".join(_type_name("", a) for a in get_args(ann) if a is not type(None))
    else:
        text = {str: "string", int: "integer", float: "number", bool: "boolean"}.get(
            ann, getattr(ann, "__name__", str(ann)))
    return text + (" (optional)" if optional and text != "section" else "")


def _default(key: str, name: str, field: Any) -> str:
    if key in DERIVED:
        return DERIVED[key]
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "—"
    if value is None:
        return "unset"
    if name.endswith("_ms") and isinstance(value, int):
        return f"`{format_duration(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple | list | dict) and not value:
        return "`[]`" if not isinstance(value, dict) else "`{}`"
    if isinstance(value, dict):
        return "`" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "`"
    if isinstance(value, str) and value == "" and not field.repr:
        return "unset"
    return f"`{_value_text(value)}`"


def _value_text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str) and value == "":
        return '""'
    return str(value)


def _description(key: str, model: type[BaseModel], name: str, field: Any, inner: Any) -> str:
    text = (field.description or _comments(model).get(name, "") or EXTRA.get(key, "")
            or _mined().get(key, ""))
    if not text and isinstance(inner, type) and issubclass(inner, BaseModel):
        text = _first_paragraph(inner.__doc__ or "")
    if text[-1:].isalpha():
        text += "."
    if not field.repr:
        text = (text + " " if text else "") + "Secret: redacted from logs, never stored."
    return _escape_html(text).replace("|", "\\|").replace("\n", " ")


def _escape_html(text: str) -> str:
    """`<` and `>` outside code spans as entities: Markdown would take `<listen>` for a tag
    and render `http://<listen>` as "http://." (inside backticks they show as written)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


_YAML_KEY = re.compile(r"^(\s*)(- )?([a-z_]+):(?:\s|$)")
_PROSE = re.compile(r"^#( |$)")


@functools.cache
def _mined() -> dict[str, str]:
    """Key -> the comment documenting it in the commented examples.

    Read from the YAML blocks of the config modules' docstrings and from
    deploy/sentinel.example.yaml (commented-out sections too): the comment at the
    end of a key's line, or, for a top-level key, the prose comment block above it.
    Only keys the model has are kept.
    """
    texts = [(ROOT / "deploy" / "sentinel.example.yaml").read_text(encoding="utf-8")]
    for module in sorted(m for m in sys.modules if m.startswith("sentinel.config.")):
        texts += re.findall(r"```yaml\n(.*?)```", sys.modules[module].__doc__ or "", re.S)
    known = {r.key for r in rows(describe=False)}
    out: dict[str, str] = {}
    for text in texts:
        for key, comment in _yaml_comments(text):
            if key in known and comment and key not in out:
                out[key] = comment
    return out


def _yaml_comments(text: str) -> Iterator[tuple[str, str]]:
    stack: list[tuple[int, str]] = []
    prose: list[str] = []
    for raw in text.splitlines():
        line = raw
        if line.startswith("#"):
            body = line[2:] if line.startswith("# ") else line[1:]
            if not _YAML_KEY.match(body) or body[:1].isupper():
                prose.append(body.strip())
                continue
            line = body
        m = _YAML_KEY.match(line)
        if not m:
            prose = [] if line.strip() == "" else prose
            continue
        indent = len(m.group(1)) + (2 if m.group(2) else 0)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if m.group(2) and stack:
            stack[-1] = (stack[-1][0], stack[-1][1].removesuffix("[]") + "[]")
        stack.append((indent, m.group(3)))
        key = ".".join(k for _, k in stack)
        comment = line.split("  # ", 1)[1].strip() if "  # " in line else ""
        if not comment and indent == 0 and prose:
            comment = " ".join(prose)
        prose = []
        yield key, comment


def _first_paragraph(doc: str) -> str:
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


_FIELD = re.compile(r"^    (\w+)\s*:")


@functools.cache
def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment above it (consecutive `#` lines) or at the end of its line."""
    out: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in lines:
            stripped = line.strip()
            if line.startswith("    #") and not line.startswith("     "):
                above.append(stripped.lstrip("#").strip())
                continue
            m = _FIELD.match(line)
            if m and not stripped.startswith(("def ", "@")):
                trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
                trailing = re.sub(r"^(noqa|type: ignore)\b.*", "", trailing)
                out[m.group(1)] = " ".join([*above, trailing]).strip()
            above = []
    return out


def _example(model: type[BaseModel]) -> str:
    """The ```yaml block of the module that defines `model`, if its docstring has one."""
    doc = sys.modules[model.__module__].__doc__ or ""
    m = re.search(r"```yaml\n(.*?)```", doc, re.S)
    return m.group(1) if m else ""


def render() -> str:
    """The whole page."""
    out = [HEADER]
    top = [r for r in rows() if "." not in r.key and "[]" not in r.key]
    all_rows = list(rows())
    out.append("## Top-level keys\n")
    out += _table([r for r in top if r.type != "section" and not _has_children(r, all_rows)])
    seen_examples: set[str] = set()
    for section in top:
        children = [r for r in all_rows if r.key.startswith((section.key + ".",
                                                               section.key + "[]."))]
        if not children:
            continue
        out.append(f"## `{section.key}`\n")
        if section.description:
            out.append(section.description + "\n")
        inner, _ = _element(Config.model_fields[_field_name(section.key)].annotation)
        example = _example(inner)
        if example and example not in seen_examples:
            seen_examples.add(example)
            out.append("```yaml\n" + example + "```\n")
        out += _table([section, *children])
    return "\n".join(out)


def _has_children(row: Row, all_rows: list[Row]) -> bool:
    return any(r.key.startswith((row.key + ".", row.key + "[].")) for r in all_rows)


def _field_name(alias: str) -> str:
    return next(n for n, f in Config.model_fields.items() if (f.alias or n) == alias)


def _table(table: list[Row]) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {r.type} | {r.default} | {r.description} |" for r in table]
    return [*lines, ""]


def main(argv: list[str]) -> int:
    """Write the page, or with --check say whether it is current."""
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python docs/gen_config_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
