"""Chat models behind one call: provider clients, the failover chain, usage and budget.

`resolve(settings, purpose)` gives the chain for a purpose or None (mechanical mode);
`LLM.complete(prompt)` walks it and returns a non-empty text or a validated pydantic
instance, or raises LLMError (LLMSkipped when the run has stopped asking models). The work
lives in `providers` (SDK clients), `answers` (reading an answer), `budget` (tokens, usage,
the run's time budget and breakers) and `chain` (resolve, failover).
"""

from mindflow.llm.answers import parse_structured
from mindflow.llm.budget import Usage, estimate_tokens
from mindflow.llm.chain import LLM, PURPOSES, LLMError, LLMSkipped, chain_for, resolve
from mindflow.llm.providers import (
    CONTEXT_TOKENS,
    DEFAULT_CONTEXT_TOKENS,
    KEY_ENV,
    MAX_RETRY_AFTER_S,
    PROVIDERS,
    ModelSpec,
    parse_spec,
)

__all__ = [
    "CONTEXT_TOKENS",
    "DEFAULT_CONTEXT_TOKENS",
    "KEY_ENV",
    "LLM",
    "LLMError",
    "LLMSkipped",
    "MAX_RETRY_AFTER_S",
    "PROVIDERS",
    "PURPOSES",
    "ModelSpec",
    "Usage",
    "chain_for",
    "estimate_tokens",
    "parse_spec",
    "parse_structured",
    "resolve",
]
