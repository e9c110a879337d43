"""Redactor, env expansion and the logging filters."""

from __future__ import annotations

import logging

import httpx
import pytest

from sentinel.secrets import (
    REDACTED,
    MissingEnvVar,
    RedactingFilter,
    Redactor,
    env_refs,
    expand_env,
    hide_http_client_urls,
    install_redaction,
    read_secret_file,
    safe_url,
    url_secret_parts,
)

HOOK = "https://hooks.example.invalid/services/T000/B000/abcdefghijklmnopqrstuvwx"


def test_known_secrets_are_replaced_longest_first() -> None:
    r = Redactor(["abc123", "abc123def456"])
    assert r.redact("x abc123def456 y abc123 z") == f"x {REDACTED} y {REDACTED} z"


def test_percent_encoded_secret_is_replaced() -> None:
    r = Redactor(["p@ss/word+1"])
    assert r.redact("url?x=p%40ss%2Fword%2B1") == f"url?x={REDACTED}"


def test_short_and_empty_secrets_are_ignored() -> None:
    r = Redactor(["", "a"])
    assert r.redact("a banana") == "a banana"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET https://bob:hunter2@example.invalid/x failed",
         f"GET https://bob:{REDACTED}@example.invalid/x failed"),
        ("postgresql://sentinel:pw@db:5432/s", f"postgresql://sentinel:{REDACTED}@db:5432/s"),
        ("POST https://h/x?token=abc&b=1", f"POST https://h/x?token={REDACTED}&b=1"),
        ("https://h/x?a=1&api_key=zz#f", f"https://h/x?a=1&api_key={REDACTED}#f"),
        ("https://h/x?key=K1&sig=S2", f"https://h/x?key={REDACTED}&sig={REDACTED}"),
        ("Authorization: Bearer abc.def", f"Authorization: Bearer {REDACTED}"),
        ("{'authorization': 'Basic dXNlcg=='}", f"{{'authorization': 'Basic {REDACTED}'}}"),
        ("nothing to hide at http://h:80/metrics?x=1", "nothing to hide at http://h:80/metrics?x=1"),
    ],
)
def test_credential_patterns_are_redacted_without_known_secrets(text: str, expected: str) -> None:
    assert Redactor().redact(text) == expected


def test_url_secret_parts() -> None:
    parts = url_secret_parts("https://u:pw12@h/services/abcdefghijklmnopq?token=t0k3n&x=1")
    assert "https://u:pw12@h/services/abcdefghijklmnopq?token=t0k3n&x=1" in parts
    assert "pw12" in parts and "t0k3n" in parts
    assert "/services/abcdefghijklmnopq" in parts and "abcdefghijklmnopq" in parts
    assert url_secret_parts("http://h") == ["http://h"]


def test_whole_webhook_url_and_its_token_segment_are_redacted() -> None:
    r = Redactor(url_secret_parts(HOOK))
    assert r.redact(f"POST {HOOK}: 500") == f"POST {REDACTED}: 500"
    assert "abcdefghijklmnopqrstuvwx" not in r.redact("bad token abcdefghijklmnopqrstuvwx")


def test_safe_url() -> None:
    assert safe_url(HOOK) == f"https://hooks.example.invalid/{REDACTED}"
    assert safe_url("http://h:8080") == "http://h:8080"
    assert safe_url("http://h:8080/?q=1") == f"http://h:8080/{REDACTED}"


def test_expand_env() -> None:
    env = {"A": "1", "B": "two"}
    assert expand_env("x${A}y${B}", env) == "x1ytwo"
    assert expand_env("$$ and $${A} and $A", env) == "$ and ${A} and $A"
    assert env_refs("${A}/$${B}/${C}") == ["A", "C"]
    with pytest.raises(MissingEnvVar) as exc:
        expand_env("${A}${MISSING}", env)
    assert exc.value.name == "MISSING"
    assert str(exc.value) == "environment variable MISSING is not set"


def test_read_secret_file_strips(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "s").write_text("  value\n\n")
    assert read_secret_file(tmp_path / "s") == "value"


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc else None
    return logging.LogRecord("t", logging.ERROR, __file__, 1, msg, args, exc_info)


def test_redacting_filter_rewrites_message_args_and_traceback() -> None:
    filt = RedactingFilter(Redactor(["s3cret-value"]))
    try:
        raise RuntimeError("boom with s3cret-value")
    except RuntimeError as e:
        rec = _record("sending to %s failed", "https://h/?token=s3cret-value", exc=e)
    assert filt.filter(rec) is True
    assert rec.getMessage() == f"sending to https://h/?token={REDACTED} failed"
    assert rec.exc_text and "s3cret-value" not in rec.exc_text and REDACTED in rec.exc_text
    assert "s3cret-value" not in logging.Formatter().format(rec)


def test_redacting_filter_survives_bad_format_args() -> None:
    rec = _record("%d items", "not-a-number")
    assert RedactingFilter(Redactor()).filter(rec) is True
    assert "not-a-number" in rec.getMessage()


def test_install_redaction_covers_records_from_child_loggers() -> None:
    logger = logging.getLogger("sentinel-test-install")
    logger.propagate = False
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Capture()
    logger.addHandler(handler)
    try:
        filt = install_redaction(Redactor(["tok-aaaa"]), logger)
        logging.getLogger("sentinel-test-install.child").warning("token %s", "tok-aaaa")
        filt.redactor = Redactor(["tok-bbbb"])  # a reload swaps the secrets
        logging.getLogger("sentinel-test-install.child").warning("token %s", "tok-bbbb")
    finally:
        logger.removeHandler(handler)
    assert seen == [f"token {REDACTED}", f"token {REDACTED}"]


def test_httpx_request_log_hides_url(caplog: pytest.LogCaptureFixture) -> None:
    hide_http_client_urls()
    hide_http_client_urls()  # idempotent
    assert sum(isinstance(f, type(logging.getLogger("httpx").filters[0]))
               for f in logging.getLogger("httpx").filters) == 1
    caplog.set_level(logging.INFO, logger="httpx")
    url = httpx.URL("https://h.invalid/hook/tok-cccc?token=tok-cccc")
    logging.getLogger("httpx").info('HTTP Request: %s %s "%s"', "POST", url, "HTTP/1.1 200")
    assert caplog.messages == [f'HTTP Request: POST https://h.invalid/{REDACTED} "HTTP/1.1 200"']


def test_the_summary_shows_a_missing_authorization_as_null_and_a_real_one_masked() -> None:
    """Issue 53: `authorization: <redacted>` was printed for a target that had none, and a
    configured one lost its `type:` line to the header pattern."""
    from sentinel.config import config_summary, parse_config

    token = "abcdefghijklmnop1234"
    summary = config_summary(parse_config({"rule_files": [], "targets": [
        {"name": "a", "url": "http://127.0.0.1:9", "authorization": {"credentials": token}},
        {"name": "b", "url": "http://127.0.0.1:9"}]}))
    assert token not in summary
    assert "authorization: null" in summary and "authorization: <redacted>" not in summary
    assert "  authorization:\n    type: Bearer\n    credentials: <redacted>" in summary
