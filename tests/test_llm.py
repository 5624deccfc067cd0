"""The LLM layer against a loopback server, through the real anthropic and openai SDKs."""

from __future__ import annotations

import json
import logging
import time

import pydantic
import pytest
from llm_server import NEVER, Reply, nested_json

from mindflow.config import load_settings
from mindflow.errors import MindflowError
from mindflow.llm import LLMError, chain_for, estimate_tokens, resolve
from mindflow.prompts import IsoDate, OptionalText, Prompt, Text, Unit, user


class Answer(pydantic.BaseModel):
    label: str
    score: float


def ask(llm, schema=Answer):
    return llm.complete(Prompt("test_prompt", "Classify.", user("the text"), schema, max_tokens=100))


def test_nothing_configured_is_mechanical(home, monkeypatch):
    for name in ("MINDFLOW_LLM", "MINDFLOW_LLM_PATROL", "MINDFLOW_LLM_FALLBACK"):
        monkeypatch.delenv(name, raising=False)
    assert resolve(load_settings(), "patrol") is None


def test_resolution_per_purpose_and_fallback_order(home, llm_server):
    llm_server.configure(
        "anthropic:claude-sonnet-4-5",
        fallback="openai:gpt-4o, anthropic:claude-sonnet-4-5,openai-compatible:llama3",
        MINDFLOW_LLM_EXTRACTION="openai:gpt-4o-mini",
    )
    settings = load_settings()
    assert [str(s) for s in chain_for(settings, "patrol")] == [
        "anthropic:claude-sonnet-4-5",
        "openai:gpt-4o",
        "openai-compatible:llama3",
    ]
    assert [str(s) for s in chain_for(settings, "extraction")] == [
        "openai:gpt-4o-mini",
        "openai:gpt-4o",
        "anthropic:claude-sonnet-4-5",
        "openai-compatible:llama3",
    ]
    # The chain is walked in that order on failure: one request to each model.
    llm_server.script([Reply(text=None, status=400), "", '{"label": "Business", "score": 0.9}'])
    llm = resolve(settings, "patrol")
    assert ask(llm) == Answer(label="Business", score=0.9)
    assert [(r.provider, r.model) for r in llm_server.requests] == [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai", "gpt-4o"),
        ("openai", "llama3"),
    ]
    assert llm.usage.failovers == 2 and llm.usage.failed_calls == 2


def test_bad_model_spec_is_a_clear_error(home, llm_server):
    llm_server.configure("claude-sonnet")
    with pytest.raises(MindflowError, match="provider:model"):
        resolve(load_settings(), "narrative")
    llm_server.configure("openai-compatible:llama3", MINDFLOW_LLM_BASE_URL=None)
    with pytest.raises(MindflowError, match="MINDFLOW_LLM_BASE_URL"):
        resolve(load_settings(), "narrative")


@pytest.mark.parametrize(
    "bad",
    [
        "this is not json",  # malformed
        '{"label": "Business", "score": 0.9',  # truncated JSON
        '{"label": ["x"], "score": "high"}',  # wrong shape
        "",  # empty text
        "   ",  # blank text
        Reply(text=None, status=400),  # a non-retryable error
        Reply(raw={"unexpected": True}),  # a body that is not the wire format
        Reply(raw={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),  # error event
        nested_json(),  # nested past Python's recursion limit
        '{"label": "Business", "score": 1' + "0" * 5_000 + "}",  # past Python's int-parsing limit
    ],
)
def test_failover_on_each_failure_kind(home, llm_server, bad):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o")
    llm_server.script([bad, '```json\n{"label": "Private", "score": 0.4}\n```'])
    llm = resolve(load_settings(), "patrol")
    assert ask(llm) == Answer(label="Private", score=0.4)
    assert [r.provider for r in llm_server.requests] == ["anthropic", "openai"]
    assert llm.usage.failovers == 1
    assert llm.usage.failed_calls == 1
    assert len(llm.usage.errors) == 1 and "anthropic:claude-sonnet-4-5" in llm.usage.errors[0]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (nested_json(), "JSON nested too deeply"),
        ('{"label": "Business", "score": 1' + "0" * 5_000 + "}", "unreadable JSON"),
    ],
)
def test_hostile_answers_are_rejected_with_their_reason(home, llm_server, bad, reason):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0")
    llm_server.script([bad])
    llm = resolve(load_settings(), "patrol")
    with pytest.raises(LLMError, match=reason):
        ask(llm)
    assert llm.usage.failed_calls == 1 and reason in llm.usage.errors[0]


def test_retry_after_is_honoured(home, llm_server):
    llm_server.configure("openai:gpt-4o")
    llm_server.script([Reply(text=None, status=429, headers={"retry-after": "0.6"}), "ok"])
    llm = resolve(load_settings(), "narrative")
    started = time.monotonic()
    assert ask(llm, schema=None) == "ok"
    assert time.monotonic() - started >= 0.6 and llm.usage.retries == 1


def test_429_then_success_retries_same_model(home, llm_server):
    llm_server.configure("openai:gpt-4o", fallback="anthropic:claude-sonnet-4-5")
    llm_server.script([429, 429, "plain words"])
    llm = resolve(load_settings(), "narrative")
    assert ask(llm, schema=None) == "plain words"
    assert [r.model for r in llm_server.requests] == ["gpt-4o"] * 3
    assert (llm.usage.retries, llm.usage.failovers, llm.usage.calls) == (2, 0, 3)
    # Tokens and cost from the price table (gpt-4o: 2.5 / 10 USD per million).
    assert (llm.usage.input_tokens, llm.usage.output_tokens) == (11, 7)
    assert llm.usage.cost_usd == pytest.approx((11 * 2.5 + 7 * 10.0) / 1e6)


def test_500_exhausts_retries_then_fails_over(home, llm_server):
    llm_server.configure("openai:gpt-4o", fallback="anthropic:claude-sonnet-4-5", LLM_MAX_RETRIES="1")
    llm_server.script([500, 503, "from claude"])
    llm = resolve(load_settings(), "narrative")
    assert ask(llm, schema=None) == "from claude"
    assert [r.provider for r in llm_server.requests] == ["openai", "openai", "anthropic"]
    assert llm.usage.retries == 1 and llm.usage.failovers == 1


def test_hang_past_timeout_is_retried_then_fails_over(home, llm_server):
    llm_server.configure(
        "anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o", LLM_TIMEOUT_S="0.5", LLM_MAX_RETRIES="1"
    )
    llm_server.script([Reply(text="late", hang=1.5), Reply(text="late", hang=1.5), "on time"])
    llm = resolve(load_settings(), "narrative")
    started = time.monotonic()
    assert ask(llm, schema=None) == "on time"
    assert time.monotonic() - started < 1.5 * 3
    assert llm.usage.retries == 1 and llm.usage.failovers == 1
    assert "timeout" in llm.usage.errors[0]


def test_all_models_fail_raises_llm_error(home, llm_server):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o", LLM_MAX_RETRIES="0")
    llm_server.script(["nope", 500])
    llm = resolve(load_settings(), "patrol")
    with pytest.raises(LLMError, match="no valid answer"):
        ask(llm)
    assert llm.usage.failed_calls == 2 and len(llm.usage.errors) == 2


def test_budget_stops_calls(home, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_BUDGET_CALLS="2")
    llm_server.script(['{"label": "a", "score": 1}'] * 5)
    llm = resolve(load_settings(), "extraction")
    ask(llm)
    ask(llm)
    with pytest.raises(LLMError, match="budget spent"):
        ask(llm)
    assert len(llm_server.requests) == 2
    # The token budget too: 18 tokens per answer, budget 20 -> the second call is refused.
    llm_server.configure("openai:gpt-4o", LLM_BUDGET_CALLS="100", LLM_BUDGET_TOKENS="20")
    llm = resolve(load_settings(), "extraction")
    ask(llm)
    ask(llm)
    with pytest.raises(LLMError, match="tokens"):
        ask(llm)
    assert llm.usage.metadata()["llm/calls"] == 2


def test_a_hung_model_is_asked_until_its_breaker_opens_for_the_whole_run(home, llm_server, caplog):
    llm_server.configure(
        "anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o",
        LLM_TIMEOUT_S="0.3", LLM_MAX_RETRIES="2", LLM_BREAKER_FAILURES="2",
    )  # fmt: skip
    llm_server.responder = lambda r: NEVER if r.provider == "anthropic" else '{"label": "a", "score": 1}'
    settings = load_settings()
    patrol = resolve(settings, "patrol", run_id="hung-run")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mindflow.llm"):
        for _ in range(5):
            assert ask(patrol) == Answer(label="a", score=1)
    # Two timeouts open the breaker (no third try); every later call goes to the fallback at once.
    assert [r.provider for r in llm_server.requests] == ["anthropic"] * 2 + ["openai"] * 5
    assert time.monotonic() - started < 0.3 * 2 + 2
    assert [m for m in caplog.messages if "breaker open" in m] == [
        "LLM patrol: breaker open for anthropic:claude-sonnet-4-5 (2 failed requests in a row, the last: "
        "timeout; MINDFLOW_LLM_BREAKER_FAILURES): the rest of this run does not ask it"
    ]
    assert patrol.metadata()["llm/breaker_open"] is True
    # Another purpose of the same run does not ask it either; another run does.
    llm_server.requests.clear()
    ask(resolve(settings, "extraction", run_id="hung-run"))
    ask(resolve(settings, "extraction", run_id="other-run"))
    assert [r.provider for r in llm_server.requests] == ["openai", "anthropic", "anthropic", "openai"]


def test_with_every_model_broken_the_run_stops_asking(home, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0", LLM_BREAKER_FAILURES="3")
    llm = resolve(load_settings(), "patrol")  # every answer: HTTP 500
    for _ in range(10):
        with pytest.raises(LLMError):
            ask(llm)
    assert len(llm_server.requests) == 3
    meta = llm.metadata()
    assert (meta["llm/calls"], meta["llm/failed_calls"], meta["llm/skipped_calls"]) == (3, 3, 7)
    assert meta["llm/breaker_open"] is True and "HTTP 500" in meta["llm/breaker"]
    with pytest.raises(LLMError, match="not asked: breaker open for openai:gpt-4o"):
        ask(llm)


def test_a_model_that_answers_again_is_asked_again(home, llm_server):
    llm_server.configure("openai:gpt-4o", LLM_MAX_RETRIES="0", LLM_BREAKER_FAILURES="3")
    llm_server.script([500, "nope", '{"label": "a", "score": 1}'] * 3)
    llm = resolve(load_settings(), "patrol")
    answers = []
    for _ in range(9):
        try:
            answers.append(ask(llm))
        except LLMError:
            answers.append(None)
    # Two failures in a row at most: the breaker (3 in a row) never opens.
    assert answers == [None, None, Answer(label="a", score=1)] * 3
    assert llm.metadata()["llm/breaker_open"] is False and llm.usage.skipped_calls == 0


def test_the_run_time_budget_bounds_the_time_spent_on_models(home, llm_server):
    llm_server.configure(
        "anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o",
        LLM_TIMEOUT_S="1", LLM_MAX_RETRIES="5", LLM_BREAKER_FAILURES="100", LLM_RUN_BUDGET_S="1.5",
    )  # fmt: skip
    llm_server.responder = lambda r: NEVER
    settings = load_settings()
    started = time.monotonic()
    for purpose in ("extraction", "patrol", "patrol"):
        with pytest.raises(LLMError):
            ask(resolve(settings, purpose, run_id="budget-run"))
    elapsed = time.monotonic() - started
    # One whole timeout, then a request cut to what is left: 1.5 s, not 3 x 6 x 1 s.
    assert 1.4 < elapsed < 2.5
    assert len(llm_server.requests) == 2
    last = resolve(settings, "narrative", run_id="budget-run")
    with pytest.raises(LLMError, match="not asked: the run's time budget for model calls is spent"):
        ask(last)
    meta = last.metadata()
    assert meta["llm/run_budget_spent"] is True and meta["llm/skipped_calls"] == 1
    assert 1.4 < meta["llm/run_seconds"] < 2.5


def test_keys_absent_from_logs_errors_and_metadata(home, llm_server, caplog):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o", LLM_MAX_RETRIES="0")
    llm_server.script([401, 500])
    llm = resolve(load_settings(), "patrol")
    with caplog.at_level(logging.DEBUG), pytest.raises(LLMError) as excinfo:
        ask(llm)
    # The keys did reach the server, in the providers' headers...
    sent = [r.headers.get("x-api-key") or r.headers.get("authorization") for r in llm_server.requests]
    assert "sk-ant-test-SECRET-anthropic-0000" in sent[0]
    assert sent[1] == "Bearer sk-test-SECRET-openai-0000"
    # ...and nowhere else.
    seen = caplog.text + str(excinfo.value) + repr(llm.metadata()) + repr(llm.usage)
    assert "SECRET" not in seen
    assert "llm/errors" in llm.usage.metadata()


def test_missing_key_fails_over_without_a_request(home, llm_server, monkeypatch):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    llm_server.script(["fine"])
    llm = resolve(load_settings(), "narrative")
    assert ask(llm, schema=None) == "fine"
    assert [r.provider for r in llm_server.requests] == ["openai"]
    assert "ANTHROPIC_API_KEY is not set" in llm.usage.errors[0]


def test_token_estimate():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 100) == 100
    assert estimate_tokens("記憶" * 10) == 20  # one per non-ASCII character


class Labelled(pydantic.BaseModel):
    label: Text
    score: Unit
    note: OptionalText = None


def test_blank_text_and_out_of_range_scores_fail_over(home, llm_server):
    llm_server.configure("anthropic:claude-sonnet-4-5", fallback="openai:gpt-4o,openai:gpt-4o-mini")
    llm_server.script([
        '{"label": " \\t\\n ", "score": 0.5}',  # whitespace only
        '{"label": "Business", "score": NaN}',  # Python's json reads NaN: refused all the same
        '{"label": "  Business ", "score": 1, "note": "   "}',
    ])  # fmt: skip
    llm = resolve(load_settings(), "patrol")
    answer = ask(llm, schema=Labelled)
    # Stripped, and a blank optional text is no text at all.
    assert answer == Labelled(label="Business", score=1.0, note=None)
    assert llm.usage.failovers == 2 and llm.usage.failed_calls == 2
    assert "label" in llm.usage.errors[0] and "score" in llm.usage.errors[1]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-05", "2026-01-05"),
        (" 2026-01-05T09:30:00Z ", "2026-01-05"),
        ("2026-01-05 09:30", "2026-01-05"),
    ],
)
def test_iso_dates_are_normalised(value, expected):
    class Dated(pydantic.BaseModel):
        date: IsoDate

    assert Dated(date=value).date == expected


@pytest.mark.parametrize("value", ["yesterday", "2026-02-30", "05/01/2026", "20260105", "", "2026-01-05x"])
def test_non_iso_dates_are_refused(value):
    class Dated(pydantic.BaseModel):
        date: IsoDate

    with pytest.raises(pydantic.ValidationError, match="ISO date"):
        Dated(date=value)


@pytest.mark.parametrize("value", [-0.01, 1.01, float("nan"), float("inf")])
def test_unit_scores_outside_zero_to_one_are_refused(value):
    with pytest.raises(pydantic.ValidationError):
        Labelled(label="x", score=value)


def _blank(payload, path):
    """payload with the string at `path` (keys and indexes) replaced by whitespace."""
    data = json.loads(json.dumps(payload))
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = " \t "
    return data


CHAPTER = {"when": "2026-01-05 09:00", "title": "A start", "text": "We began."}
CORE = {
    "identity": "I am Ada.",
    "active_context": ["billing"],
    "persona": ["direct"],
    "critical_facts": ["x"],
}


@pytest.mark.parametrize(
    ("module", "schema", "valid", "path"),
    [
        ("split", "SplitAnswer", {"groups": [{"label": "billing", "node_ids": ["n-1", "n-2"]}]},
         ("groups", 0, "label")),
        ("split", "SplitAnswer", {"groups": [{"label": "billing", "node_ids": ["n-1", "n-2"]}]},
         ("groups", 0, "node_ids", 1)),
        ("consolidate", "ConsolidateAnswer", {"merges": [{"survivor": "n-1", "absorbed": ["n-2"]}]},
         ("merges", 0, "survivor")),
        ("consolidate", "ConsolidateAnswer", {"make_dead": ["n-3"]}, ("make_dead", 0)),
        ("root", "RootAnswer", {"labels": [{"node_id": "n-1", "root": "Private"}]}, ("labels", 0, "node_id")),
        ("diary", "DiaryAnswer", {"lines": ["One.", "Two.", "Three."]}, ("lines", 2)),
        ("think", "ThinkAnswer", {"bullets": ["a", "b", "c"]}, ("bullets", 0)),
        ("narrative_bootstrap", "Chapters", {"chapters": [CHAPTER]}, ("chapters", 0, "title")),
        ("narrative_bootstrap", "Chapters", {"chapters": [CHAPTER]}, ("chapters", 0, "text")),
        ("narrative_summarise", "Summary", {"title": "Early days", "text": "Much happened."}, ("text",)),
        ("core_memory", "CoreMemory", CORE, ("identity",)),
        ("core_memory", "CoreMemory", CORE, ("critical_facts", 0)),
    ],
)  # fmt: skip
def test_a_blank_text_rejects_every_prompts_answer(module, schema, valid, path):
    import importlib

    model = getattr(importlib.import_module(f"mindflow.prompts.{module}"), schema)
    model.model_validate(valid)  # the answer as given is fine...
    with pytest.raises(pydantic.ValidationError):  # ...and blanking one text field rejects it
        model.model_validate(_blank(valid, path))
