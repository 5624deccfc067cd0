"""The failover chain of one purpose: which models it holds, and `LLM.complete` walking them.

`resolve(settings, purpose, run_id=...)` gives the chain for a purpose or None (mechanical
mode); `LLM.complete(prompt)` walks it, retrying and failing over, and returns a non-empty
text or a validated pydantic instance, or raises LLMError. Chains resolved with the same
run id share one `RunGuard`: the run's model time and each model's breaker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pydantic

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.llm.answers import parse_structured
from mindflow.llm.budget import RunGuard, Usage, estimate_tokens, run_guard
from mindflow.llm.providers import (
    CONTEXT_TOKENS,
    DEFAULT_CONTEXT_TOKENS,
    MAX_RETRY_AFTER_S,
    Client,
    ModelSpec,
    Retryable,
    Unusable,
    parse_spec,
)
from mindflow.prompts import Prompt

log = logging.getLogger("mindflow.llm")

PURPOSES = ("narrative", "patrol", "extraction", "resonance", "reflection")


class LLMError(MindflowError):
    """Every model in the chain failed, or the purpose's budget is spent."""


class LLMSkipped(LLMError):
    """No model was asked: the run stopped asking them (breaker open, run time budget spent).

    Said once for the run when it happens, and counted in `llm/skipped_calls`: callers
    fall back as for any LLMError, without a line of their own per call.
    """


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


def resolve(
    settings: Settings,
    purpose: str,
    run_id: str | None = None,
    notice: Callable[[str], None] | None = None,
) -> LLM | None:
    """The chain for a purpose; None means mechanical mode (nothing configured).

    Chains of one `run_id` (every asset of a Dagster run) share the run's guard; without
    one the chain has a guard of its own. `notice` gets the one line said when the run
    stops asking a model (e.g. the run's log), besides the `mindflow.llm` logger.
    """
    specs = chain_for(settings, purpose)
    if not specs:
        return None
    guard = run_guard(settings.llm_run_budget_s, settings.llm_breaker_failures, run_id)
    return LLM(settings, purpose, specs, run=guard, notice=notice)


class LLM:
    """A failover chain of models for one purpose, with its own budget and usage."""

    def __init__(
        self,
        settings: Settings,
        purpose: str,
        specs: list[ModelSpec],
        run: RunGuard | None = None,
        notice: Callable[[str], None] | None = None,
    ):
        if not specs:
            raise ValueError("an LLM needs at least one model")
        self.settings = settings
        self.purpose = purpose
        self.specs = specs
        self.run = run or RunGuard(settings.llm_run_budget_s, settings.llm_breaker_failures)
        self.notice = notice
        self.usage = Usage()
        # The last answer that came back but failed validation, for [PARSE_FAILED] notes.
        self.last_invalid: str | None = None
        self._clients = [Client(settings, spec) for spec in specs]

    @property
    def model(self) -> str:
        """The primary provider:model, for logs and metadata."""
        return str(self.specs[0])

    def metadata(self, prefix: str = "llm") -> dict[str, object]:
        """This purpose's usage and the run's guard (shared by the run), as flat metadata."""
        return self.usage.metadata(prefix) | self.run.metadata(prefix)

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

    def _say(self, message: str | None) -> None:
        """The one line said when the run stops asking a model (also kept in llm/errors)."""
        if message is None:
            return
        message = self._scrub(f"{self.purpose}: {message}")
        if message not in self.usage.errors:
            self.usage.errors.append(message)
        log.warning("LLM %s", message)
        if self.notice is not None:
            self.notice(f"LLM {message}")

    def _spend(self, started: float) -> None:
        self._say(self.run.spend(time.monotonic() - started))

    def _failed(self, client: Client, reason: str) -> None:
        """A request that gave no usable answer: counted, and towards the model's breaker."""
        self.usage.failed_calls += 1
        self._say(self.run.failed(str(client.spec), self._scrub(reason)))

    def _not_asked(self, prompt: Prompt, asked: bool, why: str) -> LLMError:
        """LLMSkipped when this completion sent no request, else the failure it ends with."""
        if asked:
            return LLMError(f"{self.purpose} LLM: no valid answer for {prompt.name}: {why}")
        self.usage.skipped_calls += 1
        return LLMSkipped(f"{self.purpose} LLM: {prompt.name} not asked: {why}")

    def complete(self, prompt: Prompt) -> str | pydantic.BaseModel:
        """Walk the chain; a non-empty str (schema None) or a validated schema instance.

        Models whose breaker is open in this run are skipped. With none left, or the run's
        model time spent, LLMError comes without a request: the caller's fallback works on.
        """
        self.last_invalid = None
        asked = False
        for index, client in enumerate(self._clients):
            if index:
                self.usage.failovers += 1
                log.info("LLM %s failing over to %s", self.purpose, client.spec)
            attempt = 0
            while True:
                self._check_budget()
                if self.run.exhausted:
                    raise self._not_asked(prompt, asked, "the run's time budget for model calls is spent")
                if self.run.is_open(str(client.spec)):
                    break
                if not client.ready:
                    try:
                        client.sdk()
                    except Unusable as exc:  # no key: this model cannot be asked
                        self._fail(client.spec, str(exc))
                        break
                self.usage.calls += 1
                asked = True
                started = time.monotonic()
                timeout = min(self.settings.llm_timeout_s, self.run.remaining())
                try:
                    text, tokens_in, tokens_out = client.call(prompt, timeout=timeout)
                except Retryable as exc:
                    self._spend(started)
                    self._failed(client, str(exc))
                    if attempt < self.settings.llm_max_retries and not self.run.is_open(str(client.spec)):
                        attempt += 1
                        self.usage.retries += 1
                        log.info("LLM %s %s: %s, retry %d", self.purpose, client.spec, exc, attempt)
                        backoff = self.settings.llm_retry_backoff_s * 2 ** (attempt - 1)
                        wait = max(backoff, min(exc.wait_s, MAX_RETRY_AFTER_S))
                        started = time.monotonic()
                        time.sleep(max(0.0, min(wait, self.run.remaining())))
                        self._spend(started)
                        continue
                    self._fail(client.spec, f"{exc} after {attempt} retries")
                    break
                except Unusable as exc:
                    self._spend(started)
                    self._failed(client, str(exc))
                    self._fail(client.spec, str(exc))
                    break
                except Exception as exc:  # an SDK or transport error we did not foresee
                    self._spend(started)
                    self._failed(client, type(exc).__name__)
                    self._fail(client.spec, f"{type(exc).__name__}: {exc}")
                    break
                self._spend(started)
                self.usage.input_tokens += tokens_in
                self.usage.output_tokens += tokens_out
                price_in, price_out = self._price(client.spec.model)
                self.usage.cost_usd += (tokens_in * price_in + tokens_out * price_out) / 1e6
                try:
                    if not isinstance(text, str) or not text.strip():
                        raise Unusable("empty text")
                    if prompt.schema is None:
                        self.run.succeeded(str(client.spec))
                        return text.strip()
                    answer = parse_structured(text, prompt.schema)
                    if prompt.check is not None:
                        try:
                            prompt.check(answer)
                        except ValueError as exc:
                            raise Unusable(f"rejected: {exc}") from None
                    self.run.succeeded(str(client.spec))
                    return answer
                except Unusable as exc:
                    self._failed(client, f"{prompt.name}: {exc}")
                    if isinstance(text, str) and text.strip():
                        self.last_invalid = text
                    self._fail(client.spec, f"{prompt.name}: {exc}")
                    break
        skipped = [str(s) for s in self.specs if self.run.is_open(str(s))]
        if not asked and skipped:
            raise self._not_asked(prompt, asked, f"breaker open for {', '.join(skipped)}")
        raise LLMError(
            f"{self.purpose} LLM: no valid answer for {prompt.name} from "
            f"{', '.join(str(s) for s in self.specs)} ({self.usage.errors[-1] if self.usage.errors else ''})"
        )
