"""Leave-one-conversation-out choice of settings over cached per-conversation hit vectors.

Every configuration is asked once per conversation; `hits[config][conversation]` holds the
rank of each question's first hit (None: not in the results). Choosing a configuration
for a held-out conversation then looks only at the other conversations' ranks.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

Ranks = Sequence[int | None]  # per question: the 0-based rank of its first hit, None if none


def hit_rate(ranks: Ranks, k: int) -> float:
    return sum(r is not None and r < k for r in ranks) / len(ranks) if ranks else 0.0


def pooled(hits: Mapping[Hashable, Ranks], conversations: Sequence[Hashable], k: int) -> float:
    """hit@k over the questions of these conversations, each question counted once."""
    ranks = [r for c in conversations for r in hits[c]]
    return hit_rate(ranks, k)


def choose(hits: Mapping[Hashable, Mapping[Hashable, Ranks]], conversations: Sequence[Hashable]) -> Hashable:
    """The configuration with the best mean hit@10 over `conversations` (tie-break: hit@5,
    then the first configuration listed)."""

    def key(config):
        per = [hits[config][c] for c in conversations]
        return (
            sum(hit_rate(r, 10) for r in per) / len(per),
            sum(hit_rate(r, 5) for r in per) / len(per),
        )

    best, best_key = None, None
    for config in hits:  # first listed wins a tie: `>` not `>=`
        k = key(config)
        if best_key is None or k > best_key:
            best, best_key = config, k
    return best


@dataclass(frozen=True)
class LeaveOneOut:
    chosen: dict[Hashable, Hashable]  # held-out conversation -> configuration chosen without it
    loo: dict[int, float]  # k -> mean over conversations of the held-out hit@k
    in_sample: dict[int, float]  # k -> mean hit@k of the configuration chosen on all
    in_sample_config: Hashable

    @property
    def gap(self) -> float:
        """In-sample minus leave-one-out hit@10: what tuning fits to the conversations it sees."""
        return self.in_sample[10] - self.loo[10]


def leave_one_out(
    hits: Mapping[Hashable, Mapping[Hashable, Ranks]], ks: Sequence[int] = (1, 5, 10)
) -> LeaveOneOut:
    """For each conversation, the configuration chosen on the others, scored on it; averaged."""
    conversations = list(next(iter(hits.values())))
    chosen = {}
    for held in conversations:
        others = [c for c in conversations if c != held]
        chosen[held] = choose(hits, others)
    loo = {k: sum(hit_rate(hits[chosen[c]][c], k) for c in conversations) / len(conversations) for k in ks}
    best = choose(hits, conversations)
    in_sample = {k: sum(hit_rate(hits[best][c], k) for c in conversations) / len(conversations) for k in ks}
    return LeaveOneOut(chosen, loo, in_sample, best)
