"""Configuration of diagnosis: which OpenAI-compatible model endpoints write runbooks.

```yaml
diagnosis:
  endpoints:                       # tried in order; a crashed or down one is skipped
    - name: gemma-b
      url: http://10.0.0.6:8000    # base URL; /v1/models, /tokenize, /v1/chat/completions
      # model: google/gemma-4-26B-A4B-it   # default: the first id /v1/models lists
      # target: gemma-b            # the Sentinel target this endpoint is (default: same URL)
      # api_key_file: /run/secrets/vllm-key   # or api_key: ${VLLM_API_KEY}
      timeout: 60s
  max_tokens: 1024                 # reserved for the answer within max_model_len
  structured_output: auto         # find the server's form and remember it (see
                                  # respond/diagnose/dialects.py); or force one:
                                  # response_format, json_object_schema (llama.cpp),
                                  # json_object_value (TGI), structured_outputs
                                  # (vLLM >= 0.10.2), guided_json (vLLM < 0.12),
                                  # json_object, none
  interval: 10s                    # how often open incidents are looked at
  retry: 30s                       # first backoff while no endpoint answers (doubles)
  retry_max: 5m
  deadline: 1h                     # after the incident opened, stop asking the model
  max_reply: 65536                 # bytes of reply text kept; the rest is discarded unread
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import PositiveDuration, Strict, http_url, problem, with_key_from_file

DEFAULT_MODEL_TIMEOUT_MS = 60_000
StructuredOutput = Literal["auto", "response_format", "json_object_schema", "json_object_value",
                           "structured_outputs", "guided_json", "json_object", "none"]


class ModelEndpointConfig(Strict):
    """One OpenAI-compatible server (vLLM first of all) that can diagnose."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]+$")
    url: str
    model: str | None = None
    target: str | None = None
    api_key: str = Field("", repr=False)  # secret
    api_key_file: str | None = None
    timeout_ms: PositiveDuration = Field(DEFAULT_MODEL_TIMEOUT_MS, alias="timeout")

    @model_validator(mode="after")
    def _read_key_file(self, info: ValidationInfo) -> ModelEndpointConfig:
        # After the fields: a typo elsewhere in the endpoint is reported too.
        return with_key_from_file(self, info.context)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return http_url(v, what="model endpoint URL").rstrip("/")


class DiagnosisConfig(Strict):
    """Runbooks from a self-hosted model for incidents with crash evidence."""

    endpoints: tuple[ModelEndpointConfig, ...]
    max_tokens: int = Field(1024, ge=64, le=32768)
    structured_output: StructuredOutput = "auto"
    temperature: float = Field(0.0, ge=0, le=2)
    interval_ms: PositiveDuration = Field(10_000, alias="interval")
    retry_ms: PositiveDuration = Field(30_000, alias="retry")
    retry_max_ms: PositiveDuration = Field(300_000, alias="retry_max")
    deadline_ms: PositiveDuration = Field(3_600_000, alias="deadline")
    # Bytes of the model's reply text kept (UTF-8); past it the stream is
    # closed and the runbook event says the reply was cut (issue 10).
    max_reply_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024, alias="max_reply")

    @field_validator("endpoints")
    @classmethod
    def _unique(cls, v: tuple[ModelEndpointConfig, ...]) -> tuple[ModelEndpointConfig, ...]:
        if not v:
            raise problem("list at least one model endpoint")
        seen: set[str] = set()
        for i, e in enumerate(v):
            if e.name in seen:
                raise problem(f"duplicate endpoint name {e.name!r}", i, "name")
            seen.add(e.name)
        return v

    def secrets(self) -> list[str]:
        """API keys, for the Redactor."""
        return [e.api_key for e in self.endpoints if e.api_key]
