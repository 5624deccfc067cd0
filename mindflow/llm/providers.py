"""Provider clients: one provider:model spec, its SDK client, and how a request's failure is sorted.

Keys are read from ANTHROPIC_API_KEY / OPENAI_API_KEY when a client is made; they never
enter logs, errors or metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.prompts import Prompt

PROVIDERS = ("anthropic", "openai", "openai-compatible")
KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-compatible": "OPENAI_API_KEY",
}
# Context windows by model-name prefix; anything else gets DEFAULT_CONTEXT_TOKENS.
CONTEXT_TOKENS = {
    "claude-": 200_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_000_000,
    "o3": 200_000,
    "o4": 200_000,
}
DEFAULT_CONTEXT_TOKENS = 8_192
MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After fails over instead of stalling the run


class Unusable(Exception):
    """No usable answer from this model for this request (empty, not JSON, wrong shape, HTTP 4xx, no key)."""


class Retryable(Exception):
    """429, 5xx, timeout or connection failure: worth another try on the same model."""

    def __init__(self, reason: str, wait_s: float = 0.0):
        super().__init__(reason)
        self.wait_s = wait_s  # the server's Retry-After, when it sent one


def retry_after(exc: Exception) -> float:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0) or 0))
    except (TypeError, ValueError):
        return 0.0  # an HTTP date: the exponential backoff applies


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_spec(text: str, where: str) -> ModelSpec:
    provider, sep, model = text.strip().partition(":")
    if not sep or provider not in PROVIDERS or not model.strip():
        raise MindflowError(
            f"{where}={text!r} is not provider:model; provider is one of {', '.join(PROVIDERS)} "
            f"(e.g. anthropic:claude-sonnet-4-5 or openai-compatible:llama3.1)"
        )
    return ModelSpec(provider, model.strip())


class Client:
    """One provider:model with its SDK client (made on first use)."""

    def __init__(self, settings: Settings, spec: ModelSpec):
        self.settings = settings
        self.spec = spec
        self._sdk: Any = None
        self._key: str | None = None

    def _key_value(self) -> str:
        key = os.environ.get(KEY_ENV[self.spec.provider], "").strip()
        if not key:
            if self.spec.provider == "openai-compatible":
                return "not-needed"  # local servers accept any key; the SDK needs a non-empty one
            raise Unusable(f"{KEY_ENV[self.spec.provider]} is not set")
        return key

    @property
    def ready(self) -> bool:
        return self._sdk is not None

    def sdk(self) -> Any:
        if self._sdk is None:
            self._key = self._key_value()
            base = (self.settings.llm_base_url or "").rstrip("/") or None
            timeout = self.settings.llm_timeout_s
            if self.spec.provider == "anthropic":
                import anthropic

                if base and base.endswith("/v1"):
                    base = base[: -len("/v1")]  # the SDK adds /v1/messages itself
                self._sdk = anthropic.Anthropic(
                    api_key=self._key, base_url=base, timeout=timeout, max_retries=0
                )
            else:
                import openai

                self._sdk = openai.OpenAI(api_key=self._key, base_url=base, timeout=timeout, max_retries=0)
        return self._sdk

    def secrets(self) -> list[str]:
        return [self._key] if self._key and self._key != "not-needed" else []

    def call(self, prompt: Prompt, timeout: float | None = None) -> tuple[str, int, int]:
        """(text, input tokens, output tokens); Retryable or Unusable or another exception.

        `timeout` (seconds) replaces MINDFLOW_LLM_TIMEOUT_S for this request: the run's
        guard shortens it to what is left of the run's time budget.
        """
        sdk = self.sdk()
        per_request = {} if timeout is None else {"timeout": max(0.001, timeout)}
        try:
            if self.spec.provider == "anthropic":
                resp = sdk.messages.create(
                    model=self.spec.model,
                    system=prompt.full_system(),
                    messages=prompt.messages,
                    max_tokens=prompt.max_tokens,
                    **per_request,
                )
                if getattr(resp, "type", "message") == "error":
                    raise Unusable("error event in the response")
                text = "".join(
                    getattr(block, "text", "") or ""
                    for block in (resp.content or [])
                    if getattr(block, "type", None) == "text"
                )
                usage = resp.usage
                return text, int(usage.input_tokens or 0), int(usage.output_tokens or 0)
            resp = sdk.chat.completions.create(
                model=self.spec.model,
                messages=[{"role": "system", "content": prompt.full_system()}, *prompt.messages],
                max_tokens=prompt.max_tokens,
                **per_request,
            )
            if not resp.choices:
                raise Unusable("no choices in the response")
            content = resp.choices[0].message.content
            if content is not None and not isinstance(content, str):
                raise Unusable("non-text content")
            usage = resp.usage
            return (
                content or "",
                int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0),
            )
        except (Unusable, Retryable):
            raise
        except Exception as exc:  # SDK errors: sort into retryable or not
            status = getattr(exc, "status_code", None)
            name = type(exc).__name__
            if status == 429 or (isinstance(status, int) and status >= 500):
                raise Retryable(f"HTTP {status}", retry_after(exc)) from None
            if name in ("APITimeoutError", "APIConnectionError") or isinstance(exc, TimeoutError):
                raise Retryable("timeout" if "Timeout" in name else "connection failed") from None
            if status is not None:
                raise Unusable(f"HTTP {status}") from None
            raise
