"""Leave-one-conversation-out: a held-out conversation's own results never choose its settings."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import loo  # noqa: E402


def _ranks(hit10: int, n: int = 10) -> list[int | None]:
    """n questions, `hit10` of them found at rank 0, the rest not found."""
    return [0] * hit10 + [None] * (n - hit10)


def test_the_held_out_conversation_does_not_choose_its_own_settings():
    # "fits" is best on conversation c only, by far; "general" is best on every other one.
    conversations = ["a", "b", "c", "d", "e"]
    hits = {
        "general": {c: _ranks(7) for c in conversations} | {"c": _ranks(1)},
        "fits": {c: _ranks(6) for c in conversations} | {"c": _ranks(10)},
    }
    result = loo.leave_one_out(hits)
    # Tuned on all five, "fits" wins (mean 0.68 vs 0.58); held out, c must get "general",
    # which the other four prefer, and score 0.1 on it.
    assert result.in_sample_config == "fits"
    assert result.chosen["c"] == "general"
    assert all(result.chosen[c] == "fits" for c in "abde")
    assert abs(result.loo[10] - (4 * 0.6 + 0.1) / 5) < 1e-9
    assert abs(result.in_sample[10] - (4 * 0.6 + 1.0) / 5) < 1e-9
    assert result.gap > 0


def test_changing_a_held_out_conversation_leaves_its_choice_unchanged():
    conversations = ["a", "b", "c", "d", "e"]
    base = {
        "x": {c: _ranks(5) for c in conversations},
        "y": {c: _ranks(6) for c in conversations},
        "z": {c: _ranks(4) for c in conversations},
    }
    before = loo.leave_one_out(base).chosen["b"]
    for config in base:  # make each configuration perfect on b alone, in turn
        changed = {name: dict(per) for name, per in base.items()}
        changed[config]["b"] = _ranks(10)
        assert loo.leave_one_out(changed).chosen["b"] == before == "y"


def test_ties_break_on_hit_at_5_then_the_first_listed():
    hits = {
        "first": {"a": [0, 7, None], "b": [0, 7, None]},
        "sharper": {"a": [0, 1, None], "b": [0, 1, None]},
        "same": {"a": [0, 1, None], "b": [0, 1, None]},
    }
    assert loo.choose(hits, ["a", "b"]) == "sharper"
