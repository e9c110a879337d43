"""Pure parts of diagnosis: redaction, schema validation, budget trimming; the 5 MB log."""

from __future__ import annotations

import json

import pytest
from diagnose_helpers import CRASH_LOG, T0, config, open_incident, runbooks

from sentinel.respond.diagnose.budget import (
    LEVELS,
    DoesNotFit,
    collapse_repeats,
    estimate_tokens,
    fit,
    head_and_tail,
)
from sentinel.respond.diagnose.evidence import Evidence, Excerpt
from sentinel.respond.diagnose.prompt import build_messages
from sentinel.respond.diagnose.schema import InvalidRunbook, parse_runbook
from sentinel.respond.diagnose.worker import DiagnosisWorker
from sentinel.secretpatterns import PromptRedactor
from sentinel.sim import start_sim
from sentinel.sim.tokens import ChatMessage, count_chat


@pytest.mark.parametrize(("text", "secret"), [
    ("download failed, token hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("curl -H 'authorization: bearer abcdefgh12345678'", "abcdefgh12345678"),
    ("GOOGLE_API_KEY=AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghij"),
    ('{"type": "service_account", "private_key_id": "0123456789abcdef0123", '
     '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----\\n"}',
     "MIIEvQIBADAN"),
    ('"private_key_id": "0123456789abcdef0123"', "0123456789abcdef0123"),
    ("db: postgresql://vllm:hunter2hunter2@10.0.0.9/db", "hunter2hunter2"),
    ("posting to https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
     "T000/B000/XXXXXXXXXXXXXXXX"),
    ("https://discord.com/api/webhooks/1234/abcdEFGH", "abcdEFGH"),
    ("https://chat.googleapis.com/v1/spaces/AAA/messages?key=k123&token=t456", "t456"),
    ("password=s3cr3t-value other", "s3cr3t-value"),
    ("ya29.a0AfH6SMBCanaryCanaryCanary", "a0AfH6SMBCanary"),
])
def test_credentials_are_redacted(text, secret) -> None:
    out = PromptRedactor().redact(text)
    assert secret not in out and "<redacted>" in out


def test_config_secrets_and_multiline_keys_are_redacted() -> None:
    r = PromptRedactor(["my-config-secret"])
    assert r.redact("x my-config-secret y") == "x <redacted> y"
    lines = r.lines(["before", "-----BEGIN RSA PRIVATE KEY-----", "MIIsecret",
                     "-----END RSA PRIVATE KEY-----", "after"])
    assert "MIIsecret" not in " ".join(lines) and lines[0] == "before" and lines[-1] == "after"


def test_healthy_log_text_is_left_alone() -> None:
    for line in CRASH_LOG:
        assert PromptRedactor().redact(line) == line


GOOD = {"summary": "HBM OOM", "probable_cause": "too large", "evidence": ["Used 33.80G"],
        "steps": ["lower --max-model-len"], "remediation": "none", "confidence": 0.8}


@pytest.mark.parametrize(("change", "why"), [
    ({"remediation": "rm -rf /"}, "allow-listed"),
    ({"confidence": 2}, "confidence"),
    ({"confidence": True}, "confidence"),
    ({"steps": []}, "steps"),
    ({"summary": ""}, "summary"),
    ({"evidence": [1]}, r"evidence\[0\]"),
    ({"execute": "now"}, "unexpected keys"),
])
def test_runbook_validation_rejects(change, why) -> None:
    with pytest.raises(InvalidRunbook, match=why):
        parse_runbook(json.dumps({**GOOD, **change}))


def test_runbook_validation_accepts_and_maps_none() -> None:
    book = parse_runbook(json.dumps(GOOD))
    assert book.remediation is None and book.steps == ("lower --max-model-len",)
    assert parse_runbook(json.dumps({**GOOD, "remediation": "docker_restart"})).remediation \
        == "docker_restart"
    for bad in ("", "[]", "{", "null"):
        with pytest.raises(InvalidRunbook):
            parse_runbook(bad)


def test_collapse_repeats_counts_runs_and_duplicates() -> None:
    lines = ["a 1", "a 2", "a 3", "b", "c", "b"]
    assert collapse_repeats(lines) == ["a 1", "[previous line repeated 2 more times]", "b", "c",
                                       "[1 duplicate lines dropped]"]


def test_head_and_tail_keeps_the_exception_and_error_lines() -> None:
    lines = ["Traceback (most recent call last):", *(f"  frame {i}" for i in range(100)),
             "middle RuntimeError: boom", *(f"  frame b{i}" for i in range(100)),
             "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED"]
    out = head_and_tail(lines, 12, 400)
    assert out[0] == lines[0] and out[-1] == lines[-1]
    assert "middle RuntimeError: boom" in out and any("omitted" in x for x in out)
    assert len(out) <= 12 + 2
    assert head_and_tail(["x" * 50], 5, 10) == ["xxxxxxxxxx[+40 chars]"]


def _evidence(lines) -> Evidence:
    return Evidence(1, "VLLMHBMOutOfMemory", "tpu-a", "2026-01-01T00:00:00Z",
                    (("target", "tpu-a"),), (("fp", "1"),),
                    (Excerpt("xla_hbm_oom", "hbm_oom", "file:/x", tuple(lines)),), (), (),
                    "Lower --max-model-len.", "xla_hbm_oom")


def test_fit_trims_until_it_fits_and_estimates_without_tokenize() -> None:
    ev = _evidence(CRASH_LOG * 20)
    fitted = fit(lambda t: build_messages(ev, t), lambda m: None, 4096, 512)
    assert fitted.counted_by == "estimate" and fitted.level > 0
    assert estimate_tokens(fitted.messages) + 512 <= 4096
    with pytest.raises(DoesNotFit):
        fit(lambda t: build_messages(ev, t), lambda m: None, 300, 256)


def test_fit_shrinks_the_answer_when_only_that_helps() -> None:
    ev = _evidence(CRASH_LOG)
    smallest = estimate_tokens(build_messages(ev, LEVELS[-1]))
    fitted = fit(lambda t: build_messages(ev, t), lambda m: None, smallest + 100, 1024)
    assert fitted.max_tokens == 100


def _letters(i: int) -> str:
    return "".join(chr(97 + i // 26 ** k % 26) for k in range(3))


@pytest.mark.integration
def test_a_5mb_log_against_a_small_context_is_accepted_by_the_simulator(incident_db) -> None:
    noise = [f"(APIServer pid=1) INFO 05-14 09:{i // 60 % 60:02d}:{i % 60:02d} "
             f"[loggers.py:127] Engine 000: Avg prompt throughput: {i % 977}.4 tokens/s, "
             f"Running: {i % 256} reqs, Waiting: {i % 31} reqs, GPU KV cache usage: 97.9%"
             for i in range(40_000)]
    # Lines that differ in letters, not digits, so collapsing repeats cannot save the budget.
    unique = [f"shard {_letters(i)} loaded from cache" for i in range(4_000)]
    lines = [*noise, *unique, *CRASH_LOG]
    assert sum(len(x) + 1 for x in lines) > 5_000_000
    sim = start_sim(max_model_len=2048)
    try:
        incident = open_incident(incident_db, excerpt=tuple(lines))
        worker = DiagnosisWorker(incident_db, config([{"name": "m", "url": sim.url}]))
        assert worker.tick(T0) == [incident]
        (data,) = runbooks(incident_db, incident)
        assert data["validated"] is True and data["trim_level"] > 0
        (body,) = sim.chat_requests
        messages = [ChatMessage(m["role"], m["content"]) for m in body["messages"]]
        assert count_chat(messages) + body["max_tokens"] <= 2048
        assert "RESOURCE_EXHAUSTED" in body["messages"][-1]["content"]
    finally:
        sim.stop()


def test_config_reads_the_api_key_file_and_treats_it_as_a_secret(tmp_path) -> None:
    from sentinel.config import ConfigError, parse_config

    (tmp_path / "key").write_text("sk-local-key-123\n")
    cfg = parse_config({"diagnosis": {"endpoints": [
        {"name": "m", "url": "http://127.0.0.1:1/v1", "api_key_file": "key"}]}},
        config_dir=tmp_path)
    assert cfg.diagnosis is not None and cfg.diagnosis.endpoints[0].api_key == "sk-local-key-123"
    assert "sk-local-key-123" in cfg.secrets()
    assert "sk-local-key-123" not in repr(cfg)
    with pytest.raises(ConfigError, match="structured_output"):
        parse_config({"diagnosis": {"endpoints": [{"name": "m", "url": "http://h"}],
                                    "structured_output": "xml"}})
