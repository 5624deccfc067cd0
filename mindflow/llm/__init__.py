"""Chat models behind one call: provider clients, the failover chain, retries, budget, usage.

`resolve(settings, purpose)` gives the chain for a purpose or None (mechanical mode);
`LLM.complete(prompt)` walks it and returns a non-empty text or a validated pydantic
instance, or raises LLMError. Keys are read from ANTHROPIC_API_KEY / OPENAI_API_KEY when a
client is made; they never enter logs, errors or metadata.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import pydantic

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.prompts import Prompt

log = logging.getLogger("mindflow.llm")

PROVIDERS = ("anthropic", "openai", "openai-compatible")
PURPOSES = ("narrative", "patrol", "extraction")
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


def _retry_after(exc: Exception) -> float:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0) or 0))
    except (TypeError, ValueError):
        return 0.0  # an HTTP date: the exponential backoff applies


class LLMError(MindflowError):
    """Every model in the chain failed, or the run's budget is spent."""


def estimate_tokens(text: str) -> int:
    """The documented estimate: ASCII characters / 4 plus one token per other character.

    BPE tokenizers average about four English characters per token; CJK and other
    non-ASCII characters are mostly one token each, so they are counted one to one.
    It errs high, which is the safe side for batching.
    """
    if not text:
        return 0
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


@dataclass
class Usage:
    """What one purpose's calls cost in one run."""

    calls: int = 0
    failed_calls: int = 0
    failovers: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)

    def metadata(self, prefix: str = "llm") -> dict[str, Any]:
        """Flat metadata for a MaterializeResult (no keys, short error reasons only)."""
        out: dict[str, Any] = {
            f"{prefix}/calls": self.calls,
            f"{prefix}/failed_calls": self.failed_calls,
            f"{prefix}/failovers": self.failovers,
            f"{prefix}/retries": self.retries,
            f"{prefix}/input_tokens": self.input_tokens,
            f"{prefix}/output_tokens": self.output_tokens,
            f"{prefix}/cost_usd": round(self.cost_usd, 6),
        }
        if self.errors:
            out[f"{prefix}/errors"] = "\n".join(self.errors[-20:])
        return out


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


def chain_for(settings: Settings, purpose: str) -> list[ModelSpec]:
    """MINDFLOW_LLM_<PURPOSE> else MINDFLOW_LLM, then MINDFLOW_LLM_FALLBACK, without repeats."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown LLM purpose {purpose!r}")
    specs: list[ModelSpec] = []
    primary = getattr(settings, f"llm_{purpose}") or settings.llm
    where = f"MINDFLOW_LLM_{purpose.upper()}" if getattr(settings, f"llm_{purpose}") else "MINDFLOW_LLM"
    if primary:
        specs.append(parse_spec(primary, where))
    for item in (settings.llm_fallback or "").split(","):
        if item.strip():
            spec = parse_spec(item, "MINDFLOW_LLM_FALLBACK")
            if spec not in specs:
                specs.append(spec)
    if specs and any(s.provider == "openai-compatible" for s in specs) and not settings.llm_base_url:
        raise MindflowError(
            "openai-compatible needs MINDFLOW_LLM_BASE_URL (e.g. http://localhost:11434/v1 for Ollama)"
        )
    return specs


def resolve(settings: Settings, purpose: str) -> LLM | None:
    """The chain for a purpose; None means mechanical mode (nothing configured)."""
    specs = chain_for(settings, purpose)
    return LLM(settings, purpose, specs) if specs else None


class _Invalid(Exception):
    """An answer that came back but cannot be used (empty, not JSON, wrong shape)."""


class _Retryable(Exception):
    """429, 5xx, timeout or connection failure: worth another try on the same model."""

    def __init__(self, reason: str, wait_s: float = 0.0):
        super().__init__(reason)
        self.wait_s = wait_s  # the server's Retry-After, when it sent one


_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*|\s*```$")


def parse_structured(text: str, schema: type[pydantic.BaseModel]) -> pydantic.BaseModel:
    """The one JSON object in a model's answer, validated; _Invalid otherwise."""
    body = _FENCE.sub("", text.strip()).strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise _Invalid("no JSON object in the answer")
        body = body[start : end + 1]
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise _Invalid(f"malformed JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(data, dict):
        raise _Invalid("the answer is not a JSON object")
    try:
        return schema.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
        raise _Invalid(f"wrong shape: {loc}: {first.get('msg')}") from None


class _Client:
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
            raise _Invalid(f"{KEY_ENV[self.spec.provider]} is not set")
        return key

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

    def call(self, prompt: Prompt) -> tuple[str, int, int]:
        """(text, input tokens, output tokens); _Retryable or _Invalid or another exception."""
        sdk = self.sdk()
        try:
            if self.spec.provider == "anthropic":
                resp = sdk.messages.create(
                    model=self.spec.model,
                    system=prompt.full_system(),
                    messages=prompt.messages,
                    max_tokens=prompt.max_tokens,
                )
                if getattr(resp, "type", "message") == "error":
                    raise _Invalid("error event in the response")
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
            )
            if not resp.choices:
                raise _Invalid("no choices in the response")
            content = resp.choices[0].message.content
            if content is not None and not isinstance(content, str):
                raise _Invalid("non-text content")
            usage = resp.usage
            return (
                content or "",
                int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0),
            )
        except (_Invalid, _Retryable):
            raise
        except Exception as exc:  # SDK errors: sort into retryable or not
            status = getattr(exc, "status_code", None)
            name = type(exc).__name__
            if status == 429 or (isinstance(status, int) and status >= 500):
                raise _Retryable(f"HTTP {status}", _retry_after(exc)) from None
            if name in ("APITimeoutError", "APIConnectionError") or isinstance(exc, TimeoutError):
                raise _Retryable("timeout" if "Timeout" in name else "connection failed") from None
            if status is not None:
                raise _Invalid(f"HTTP {status}") from None
            raise


class LLM:
    """A failover chain of models for one purpose, with its own budget and usage."""

    def __init__(self, settings: Settings, purpose: str, specs: list[ModelSpec]):
        if not specs:
            raise ValueError("an LLM needs at least one model")
        self.settings = settings
        self.purpose = purpose
        self.specs = specs
        self.usage = Usage()
        # The last answer that came back but failed validation, for [PARSE_FAILED] notes.
        self.last_invalid: str | None = None
        self._clients = [_Client(settings, spec) for spec in specs]

    @property
    def model(self) -> str:
        """The primary provider:model, for logs and metadata."""
        return str(self.specs[0])

    def context_tokens(self) -> int:
        """The smallest context window in the chain: a batch must fit every model that may get it."""
        if self.settings.llm_context_tokens:
            return int(self.settings.llm_context_tokens)
        sizes = []
        for spec in self.specs:
            size = DEFAULT_CONTEXT_TOKENS
            for prefix, tokens in CONTEXT_TOKENS.items():
                if spec.provider != "openai-compatible" and spec.model.startswith(prefix):
                    size = tokens
            sizes.append(size)
        return min(sizes)

    def count_tokens(self, text: str) -> int:
        """tiktoken for OpenAI models when it is installed, the documented estimate otherwise."""
        spec = self.specs[0]
        if spec.provider == "openai":
            try:
                import tiktoken

                return len(tiktoken.encoding_for_model(spec.model).encode(text))
            except Exception:  # not installed or unknown model: the estimate is the fallback
                pass
        return estimate_tokens(text)

    def _price(self, model: str) -> tuple[float, float]:
        best = ""
        for name in self.settings.llm_prices:
            if model.startswith(name) and len(name) > len(best):
                best = name
        return tuple(self.settings.llm_prices[best]) if best else (0.0, 0.0)  # type: ignore[return-value]

    def _scrub(self, text: str) -> str:
        for client in self._clients:
            for secret in client.secrets():
                text = text.replace(secret, "***")
        return text[:300]

    def _fail(self, spec: ModelSpec, reason: str) -> None:
        reason = self._scrub(f"{self.purpose} {spec}: {reason}")
        self.usage.errors.append(reason)
        log.warning("LLM call failed: %s", reason)

    def _check_budget(self) -> None:
        used = self.usage.input_tokens + self.usage.output_tokens
        if self.usage.calls >= self.settings.llm_budget_calls:
            reason = f"budget spent: {self.usage.calls} of {self.settings.llm_budget_calls} calls"
        elif used >= self.settings.llm_budget_tokens:
            reason = f"budget spent: {used} of {self.settings.llm_budget_tokens} tokens"
        else:
            return
        if reason not in self.usage.errors:
            self.usage.errors.append(reason)
            log.warning("LLM %s %s", self.purpose, reason)
        raise LLMError(f"{self.purpose} LLM {reason} (raise MINDFLOW_LLM_BUDGET_CALLS/_TOKENS)")

    def complete(self, prompt: Prompt) -> str | pydantic.BaseModel:
        """Walk the chain; a non-empty str (schema None) or a validated schema instance."""
        self.last_invalid = None
        for index, client in enumerate(self._clients):
            if index:
                self.usage.failovers += 1
                log.info("LLM %s failing over to %s", self.purpose, client.spec)
            attempt = 0
            while True:
                self._check_budget()
                if client._sdk is None:
                    try:
                        client.sdk()
                    except _Invalid as exc:  # no key: this model cannot be asked
                        self._fail(client.spec, str(exc))
                        break
                self.usage.calls += 1
                try:
                    text, tokens_in, tokens_out = client.call(prompt)
                except _Retryable as exc:
                    self.usage.failed_calls += 1
                    if attempt < self.settings.llm_max_retries:
                        attempt += 1
                        self.usage.retries += 1
                        log.info("LLM %s %s: %s, retry %d", self.purpose, client.spec, exc, attempt)
                        backoff = self.settings.llm_retry_backoff_s * 2 ** (attempt - 1)
                        time.sleep(max(backoff, min(exc.wait_s, MAX_RETRY_AFTER_S)))
                        continue
                    self._fail(client.spec, f"{exc} after {attempt} retries")
                    break
                except _Invalid as exc:
                    self.usage.failed_calls += 1
                    self._fail(client.spec, str(exc))
                    break
                except Exception as exc:  # an SDK or transport error we did not foresee
                    self.usage.failed_calls += 1
                    self._fail(client.spec, f"{type(exc).__name__}: {exc}")
                    break
                self.usage.input_tokens += tokens_in
                self.usage.output_tokens += tokens_out
                price_in, price_out = self._price(client.spec.model)
                self.usage.cost_usd += (tokens_in * price_in + tokens_out * price_out) / 1e6
                try:
                    if not isinstance(text, str) or not text.strip():
                        raise _Invalid("empty text")
                    if prompt.schema is None:
                        return text.strip()
                    answer = parse_structured(text, prompt.schema)
                    if prompt.check is not None:
                        try:
                            prompt.check(answer)
                        except ValueError as exc:
                            raise _Invalid(f"rejected: {exc}") from None
                    return answer
                except _Invalid as exc:
                    self.usage.failed_calls += 1
                    if isinstance(text, str) and text.strip():
                        self.last_invalid = text
                    self._fail(client.spec, f"{prompt.name}: {exc}")
                    break
        raise LLMError(
            f"{self.purpose} LLM: no valid answer for {prompt.name} from "
            f"{', '.join(str(s) for s in self.specs)} ({self.usage.errors[-1] if self.usage.errors else ''})"
        )
