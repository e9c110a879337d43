"""One diagnosis of one incident: pick an endpoint that is not the patient, fit, ask, validate.

Endpoints are tried in order. One is skipped when it serves the target that
crashed (the patient is not the doctor), and passed over when it is down or
fails; a reply that does not validate is asked for once more, then kept as
raw text marked unvalidated. The result is data; storing it is the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from sentinel.config.diagnosis import DiagnosisConfig
from sentinel.config.model import TargetConfig
from sentinel.respond.diagnose.budget import DoesNotFit, Fitted, estimate_tokens, fit
from sentinel.respond.diagnose.client import ChatResult, ModelClient, ModelError
from sentinel.respond.diagnose.evidence import Evidence
from sentinel.respond.diagnose.prompt import build_messages
from sentinel.respond.diagnose.schema import InvalidRunbook, Runbook, parse_runbook

# When /v1/models does not say (a server other than vLLM), assume a modest context.
FALLBACK_MAX_MODEL_LEN = 8192
ATTEMPTS_PER_ENDPOINT = 2  # the first answer and one retry when it does not validate


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """What an endpoint answered: a validated runbook, or raw text that did not validate."""

    endpoint: str
    model: str
    runbook: Runbook | None
    raw: str
    invalid_reason: str
    chat: ChatResult
    fitted: Fitted
    attempts: int


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """No endpoint answered. `retryable`: whether asking later may work."""

    errors: tuple[tuple[str, str], ...]  # (endpoint, message), no secrets in them
    retryable: bool
    skipped: tuple[str, ...] = field(default_factory=tuple)  # endpoints that are the patient


def _host_port(url: str) -> tuple[str, int | None]:
    split = urlsplit(url)
    port = split.port or (443 if split.scheme == "https" else 80)
    return (split.hostname or "").lower(), port


class Diagnoser:
    """Asks the configured endpoints, in order, for a runbook."""

    def __init__(self, config: DiagnosisConfig, targets: Sequence[TargetConfig],
                 clients: Sequence[ModelClient] | None = None) -> None:
        self.config = config
        self.targets = {t.name: t for t in targets}
        self.clients = list(clients) if clients is not None else [
            ModelClient(e, max_reply_bytes=config.max_reply_bytes) for e in config.endpoints]

    def close(self) -> None:
        """Close every client."""
        for c in self.clients:
            c.close()

    def is_patient(self, client: ModelClient, target: str) -> bool:
        """Whether this endpoint is the target the incident is about."""
        ep = client.endpoint
        if ep.target is not None:
            return ep.target == target
        t = self.targets.get(target)
        return t is not None and _host_port(t.url) == _host_port(ep.url.removesuffix("/v1"))

    def diagnose(self, ev: Evidence) -> ModelAnswer | NoAnswer:
        """Ask each endpoint that is not the patient until one answers."""
        errors: list[tuple[str, str]] = []
        skipped: list[str] = []
        retryable = False
        for client in self.clients:
            if self.is_patient(client, ev.target):
                skipped.append(client.name)
                continue
            try:
                return self._ask(client, ev)
            except ModelError as exc:
                errors.append((client.name, str(exc)))
                retryable = retryable or exc.retryable
            except DoesNotFit as exc:
                errors.append((client.name, str(exc)))
        # No endpoint at all besides the patient: it may come back, so try later.
        return NoAnswer(tuple(errors), retryable or not errors, tuple(skipped))

    def _ask(self, client: ModelClient, ev: Evidence) -> ModelAnswer:
        cfg = self.config
        info = client.models()
        fitted = fit(lambda trim: build_messages(ev, trim),
                     lambda messages: client.count_tokens(info.id, messages),
                     info.max_model_len or FALLBACK_MAX_MODEL_LEN, cfg.max_tokens)
        reason = ""
        refusals: tuple[tuple[str, str], ...] = ()
        for attempt in range(1, ATTEMPTS_PER_ENDPOINT + 1):
            chat = with_usage(client, info.id, fitted, client.chat_structured(
                info.id, fitted.messages, fitted.max_tokens, cfg.structured_output,
                cfg.temperature))
            # What the server refused on the way to its form stays on the record, also
            # when the answer that stands came on a later attempt.
            refusals = refusals or chat.refusals
            chat = replace(chat, refusals=refusals)
            try:
                runbook = parse_runbook(chat.text)
            except InvalidRunbook as exc:
                reason = str(exc)
                continue
            return ModelAnswer(client.name, info.id, runbook, chat.text, "", chat, fitted,
                               attempt)
        return ModelAnswer(client.name, info.id, None, chat.text, reason, chat, fitted,
                           ATTEMPTS_PER_ENDPOINT)


def with_usage(client: ModelClient, model: str, fitted: Fitted, chat: ChatResult) -> ChatResult:
    """`chat` with token counts where the server sent none (llama.cpp's and TGI's streams).

    The prompt's count is the one `fit` made; the reply's is the server's /tokenize
    where it has one, else estimated from its bytes as `fit` does. `usage_from`
    says which: "server", "tokenize" or "estimate".
    """
    if chat.prompt_tokens is not None and chat.completion_tokens is not None:
        return chat
    completion, how = chat.completion_tokens, fitted.counted_by
    if completion is None:
        try:
            completion = client.count_text_tokens(model, chat.text)
        except ModelError:
            completion = None
        if completion is None:
            completion, how = estimate_tokens([{"role": "assistant", "content": chat.text}]), \
                "estimate"
    prompt = chat.prompt_tokens if chat.prompt_tokens is not None else fitted.prompt_tokens
    return replace(chat, prompt_tokens=prompt, completion_tokens=completion, usage_from=how)
