"""Fuzzing the loaders and parsers that read text from outside: no traceback, ever.

Hypothesis drives the config loader, the rule loader, the signature loader,
the exposition parser and the log classifier with hostile and half-valid
input (YAML with control characters, aliases and broken structure; pages
with odd blanks, quotes, escapes and numbers; log lines of any shape). The
only acceptable failure is the loader's own error naming a position:
`file:line` for YAML, a 1-based line for exposition text; the classifier
must not fail at all.

Bounded and repeatable for CI: `derandomize=True` (the same examples every
run, no database of past failures) and a fixed number of examples each.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import yaml
from fakes.kube_server import pod as kube_pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel.collect.exposition import ExpositionError, SeriesCache, parse_exposition
from sentinel.collect.kubernetes_sd import safe_pod_target
from sentinel.config.kubernetes import KubernetesSDConfig
from sentinel.config.load import ConfigError, load_config
from sentinel.daemon.app import App
from sentinel.logs.classify import Classifier
from sentinel.logs.signatures import SignatureFileError, load_signature_file, parse_signatures
from sentinel.model import LogEntry
from sentinel.promql.engine import Engine
from sentinel.promql.errors import PromQLError
from sentinel.respond.diagnose.client import ModelError, _read_stream
from sentinel.rules.loader import parse_rule_file
from sentinel.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = (ROOT / "deploy" / "sentinel.example.yaml").read_text()
RULES = (ROOT / "rules" / "vllm.yaml").read_text()
SIGNATURES_TEXT = (ROOT / "rules" / "signatures.yaml").read_text()
SIGNATURES = load_signature_file(ROOT / "rules" / "signatures.yaml")
LOG_LINES = [ln for f in sorted((ROOT / "tests" / "data" / "logs").glob("*.log"))
             for ln in f.read_text().splitlines()]

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Characters that matter to YAML, a few control characters PyYAML refuses,
# and some non-ASCII; no lone surrogates (they cannot be written as UTF-8).
YAML_CHARS = st.sampled_from(list(":-[]{}&*!|>'\"#%@`,? \n\t") + list("ab01_.$")
                             + ["\x00", "\x01", "\x1b", "\x7f", "\x85", "\ufeff", "é", "\u2028"])


@st.composite
def mutated(draw: st.DrawFn, base: str) -> str:
    """`base` with a few random insertions, deletions and replacements."""
    text = base
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 8))
        piece = draw(st.text(YAML_CHARS, max_size=12))
        text = text[:at] + piece + text[at + cut:]
    return text


def _scalar() -> st.SearchStrategy[object]:
    return st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6),
                     st.floats(allow_nan=False), st.text(max_size=12))


def structured(top_keys: list[str]) -> st.SearchStrategy[str]:
    """Well-formed YAML with plausible keys in any shape: exercises validation, not syntax."""
    leaf = _scalar()
    tree = st.recursive(leaf, lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.dictionaries(st.sampled_from([*top_keys, "name", "url", "x", "1"]), kids,
                        max_size=3)), max_leaves=12)
    doc = st.dictionaries(st.sampled_from(top_keys), tree, max_size=4)
    return doc.map(lambda d: yaml.safe_dump(d, allow_unicode=True))


def yaml_texts(example: str, top_keys: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(YAML_CHARS, max_size=300), mutated(example),
                     structured(top_keys))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole module (hypothesis runs many examples per test call)."""
    return tmp_path_factory.mktemp("fuzz")


def _write(folder: Path, text: str) -> Path:
    path = folder / "f.yaml"
    path.write_text(text, encoding="utf-8")
    return path


CONFIG_KEYS = ["targets", "receivers", "routes", "diagnosis", "remediation", "database",
               "listen", "rule_files", "evaluation_interval", "defaults", "logs"]


@FUZZ
@given(text=yaml_texts(EXAMPLE_CONFIG, CONFIG_KEYS))
def test_config_loader_fails_only_with_file_and_line(folder: Path, text: str) -> None:
    path = _write(folder, text)
    try:
        load_config(path, environ={})
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.file == str(path)
            assert problem.line is not None and problem.line >= 1, str(problem)


RULE_PROBLEM = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): .+", re.DOTALL)


@FUZZ
@given(text=yaml_texts(RULES, ["groups", "name", "rules", "alert", "expr", "for", "labels",
                               "annotations", "interval", "keep_firing_for", "record", "limit"]))
def test_rule_loader_fails_only_with_file_line_and_column(folder: Path, text: str) -> None:
    path = _write(folder, text)
    _groups, problems = parse_rule_file(str(path))
    for problem in problems:
        m = RULE_PROBLEM.match(problem)
        assert m is not None and m.group("file") == str(path), problem
        assert int(m.group("line")) >= 1, problem


SIGNATURE_PROBLEM = re.compile(r"^sig\.yaml:(?P<line>\d+): .+", re.DOTALL)


@FUZZ
@given(yaml_texts(SIGNATURES_TEXT, ["signatures", "name", "category", "severity", "pattern",
                                    "context_before", "context_after", "runbook"]))
def test_signature_loader_fails_only_with_file_and_line(text: str) -> None:
    try:
        parse_signatures(text, "sig.yaml")
    except SignatureFileError as exc:
        for problem in str(exc).split("\n"):
            if not problem.strip():
                continue
            m = SIGNATURE_PROBLEM.match(problem)
            assert m is not None and int(m.group("line")) >= 1, problem


# Exposition pages: lines assembled from valid and invalid pieces.
NAMES = st.sampled_from(["a", "vllm:num_requests_running", "_x", "a:b", "9bad", "", "a-b"])
LABEL_VALUES = st.lists(st.sampled_from([*'ab "\\n{},=#\t', "\\\\", '\\"', "é"]),
                        max_size=10).map("".join)
LABEL = st.tuples(st.sampled_from(["b", "le", "_c", "1x", ""]),
                  st.sampled_from(["=", " = ", "=\t"]), LABEL_VALUES, st.booleans())
VALUES = st.sampled_from(["1", "-0", "1.5e-3", "+Inf", "-inf", "NaN", "-nan", "1_000", "١",
                          "0x10", "1e400", "1e", ".", "Infinity", "", "1\x0b", "2 3", "4 -5"])
BLANKS = st.sampled_from(["", " ", "\t", "  ", " \t "])


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    name = draw(NAMES)
    labels = ""
    if draw(st.booleans()):
        pairs = []
        for key, eq, value, quoted in draw(st.lists(LABEL, max_size=3)):
            pairs.append(f'{key}{eq}"{value}"' if quoted else f"{key}{eq}{value}")
        labels = draw(BLANKS) + "{" + ",".join(pairs) + draw(st.sampled_from(["", ","]))
        labels += draw(st.sampled_from(["}", "", " }"]))
    ts = draw(st.sampled_from(["", " 1700000000000", " -1", " 1.5", " 9223372036854775808"]))
    tail = draw(st.sampled_from(["", " # {t=\"1\"} 1", "\r", "  "]))
    return f"{name}{labels}{draw(BLANKS)} {draw(VALUES)}{ts}{tail}"


COMMENTS = st.sampled_from(["# HELP a text", "# TYPE a counter", "# TYPE a nope", "# HELP",
                            "# EOF", "#", "# free text", "# UNIT a seconds", "#\tTYPE a gauge"])
PAGE_LINES = st.one_of(sample_line(), COMMENTS, st.text(max_size=30), st.just(""))
PAGES = st.lists(PAGE_LINES, max_size=12).map("\n".join)


def _values(samples: list) -> list:
    return [("nan" if math.isnan(v) else v, ts) for _, v, ts in samples]


@settings(FUZZ, max_examples=400)
@given(PAGES)
def test_exposition_parsers_fail_only_with_a_line_and_agree(text: str) -> None:
    try:
        expected = parse_exposition(text)
    except ExpositionError as exc:
        assert 1 <= exc.line <= text.count("\n") + 1, exc
        expected = None
    slots: dict = {}
    cache = SeriesCache(lambda labels: slots.setdefault(labels, len(slots)))
    for _ in range(2):  # cold, then warm: the cached fast path must agree with the full parser
        try:
            page = cache.parse(text)
        except ExpositionError as exc:
            assert expected is None, f"the cache refused what the parser took: {exc}"
            assert exc.line >= 1, exc
            continue
        assert expected is not None, "the cache took what the parser refused"
        by_slot = {s: lb for lb, s in slots.items()}
        got = [(by_slot[s], v, page.timestamps.get(i))
               for i, (s, v) in enumerate(zip(page.slots, page.values, strict=True))]
        assert [lb for lb, _, _ in got] == [lb for lb, _, _ in expected]
        assert _values(got) == _values(expected)


LOG_TEXT = st.one_of(
    st.sampled_from(LOG_LINES),
    mutated("(EngineCore_DP0 pid=412) ERROR 05-14 09:12:07 [core.py:710] Traceback"),
    st.text(max_size=200),
    st.lists(st.sampled_from([*"\r\n\t\x00\x1b é", "Traceback", "Error", "  File"]),
             max_size=60).map("".join),
    st.integers(0, 70_000).map(lambda n: "x" * n),
)


@settings(FUZZ, max_examples=100)
@given(st.lists(LOG_TEXT, max_size=40))
def test_log_classifier_never_fails_and_batches_agree(texts: list[str]) -> None:
    entries = [LogEntry("t", "file:/x", 1000 + i, text, i + 1) for i, text in enumerate(texts)]
    batch = Classifier(SIGNATURES)
    one_by_one = Classifier(SIGNATURES)
    events = batch.feed_many(entries) + batch.flush()
    single = [ev for e in entries for ev in one_by_one.feed(e)] + one_by_one.flush()
    assert events == single
    for ev in events:
        assert len(ev.excerpt) <= batch.max_excerpt_lines + 1
        assert sum(len(line) for line in ev.excerpt) <= batch.max_excerpt_chars + 200


# -- the model's stream, Kubernetes pods, PromQL, the API's parameters (issue 39) ------------

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)),
    lambda kids: st.one_of(st.lists(kids, max_size=3),
                           st.dictionaries(st.sampled_from(
                               ["choices", "delta", "content", "finish_reason", "usage",
                                "error", "message", "index", "x"]), kids, max_size=4)),
    max_leaves=10)


@st.composite
def stream_lines(draw: st.DrawFn) -> list[str]:
    """Server-sent chat chunks of any shape, some well-formed, maybe ending in [DONE]."""
    good = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
    chunks = draw(st.lists(st.one_of(st.just(good), JSON), max_size=6))
    lines = [f"data: {json.dumps(c)}" for c in chunks]
    lines += draw(st.lists(st.text(max_size=20), max_size=2))  # not even JSON
    if draw(st.booleans()):
        lines.append("data: [DONE]")
    return lines


@FUZZ
@given(lines=stream_lines())
def test_model_stream_parser_fails_only_with_a_model_error(lines: list[str]) -> None:
    try:
        reply = _read_stream(iter(lines), time.monotonic() + 60, 1 << 20)
    except ModelError:
        return
    assert isinstance(reply.text, str)


@st.composite
def pods(draw: st.DrawFn) -> object:
    """A valid pod with a few values anywhere in it replaced by anything JSON can hold."""
    p = kube_pod("p", namespace="ns", labels={"app": "vllm"})
    for _ in range(draw(st.integers(0, 4))):
        node: object = p
        path = draw(st.lists(st.sampled_from(
            ["metadata", "spec", "status", "containers", "ports", "labels", "name", "podIP",
             "containerPort", "phase", 0]), min_size=1, max_size=4))
        for key in path[:-1]:
            try:
                node = node[key]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                break
        if isinstance(node, dict) and isinstance(path[-1], str):
            node[path[-1]] = draw(JSON)
        elif isinstance(node, list) and node and path[-1] == 0:
            node[0] = draw(JSON)
    return draw(st.one_of(st.just(p), JSON)) if draw(st.integers(0, 9)) == 0 else p


SD = KubernetesSDConfig.model_validate({"name": "vllm", "namespaces": ["ns"], "port": "http",
                                        "label_selector": "app=vllm"})


@FUZZ
@given(pod=pods())
def test_kubernetes_pod_parser_never_fails(pod: object) -> None:
    target, why = safe_pod_target(pod, SD, 5000, 4000)
    assert (target is None) or (why is None)


PROMQL_TOKENS = st.sampled_from([
    "up", "x", "{", "}", "(", ")", "[", "]", "5m", "1y", "1ms", ":", ",", " ", "@", "@ ", "-",
    "+", "*", "/", "^", "offset", "by", "sum", "rate", "count_over_time", "vector", "start()",
    '"a"', '=', '=~', 'a="b"', "1", "0", "-1", "1e30", "-1e30", "1e400", "0x7fffffffffffffff",
    "9223372036854775807", "18446744073709551616", "1.5", "inf", "nan", ".5", "5e-324",
    "and", "or", "unless", "==", ">", "bool", "#", "\n", "é"])


@st.composite
def promql_texts(draw: st.DrawFn) -> str:
    text = "".join(draw(st.lists(PROMQL_TOKENS, max_size=24)))
    depth = draw(st.sampled_from([0, 0, 0, 3, 70, 300]))  # past the nesting limit too
    return "(" * depth + text + ")" * depth


@FUZZ
@given(text=promql_texts(), at=st.integers(-(2**63), 2**63))
def test_promql_fails_only_with_a_promql_error(text: str, at: int) -> None:
    engine = Engine(MemoryStore(), max_points=100_000, timeout_s=5)
    try:
        engine.query(text, at)
    except PromQLError:
        pass


API_PARAMS = st.sampled_from(["status", "alertname", "target", "category", "since", "until",
                              "limit", "cursor", "by", "query", "time", "x"])
HOSTILE_VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["inf", "-inf", "nan", "1e308", "-1e308", "99999999999999999999", "²",
                     "١٢", "0x10", "-1", "0", "30d", "9999999999y", "2026-13-40", "%", "\x00",
                     "bWFueTo1", "OTk5OTk5OTk5OTk5OTk5OTk5OTk6MQ", "up", "(", "up @ -1"]))
API_PATHS = st.sampled_from(["/api/v1/incidents", "/api/v1/stats", "/api/v1/query",
                             "/api/v1/approvals", "/api/v1/targets", "/api/v2/silences",
                             "/api/v1/incidents/{v}", "/incidents/{v}", "/api/v2/silence/{v}"])


@pytest.fixture(scope="module")
def api_url(folder: Path) -> Iterator[str]:
    cfg = folder / "api.yaml"
    cfg.write_text(f"database: sqlite:///{folder / 'api.db'}\nlisten: 127.0.0.1:0\n")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield f"http://{host}:{port}"
    app.stop(2)


@settings(FUZZ, max_examples=200)
@given(path=API_PATHS, params=st.dictionaries(API_PARAMS, HOSTILE_VALUES, max_size=4),
       value=HOSTILE_VALUES)
def test_api_parameters_never_give_a_500(api_url: str, path: str, params: dict[str, str],
                                         value: str) -> None:
    url = api_url + path.replace("{v}", quote(value, safe="") or "x")
    r = httpx.get(url, params=params, timeout=30)
    assert r.status_code < 500 or (r.status_code == 503 and "max_" in r.text), (url, r.text)
    assert "Traceback" not in r.text
