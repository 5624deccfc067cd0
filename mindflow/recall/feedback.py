"""Pseudo-relevance feedback: the words the best candidates share, to search for again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from mindflow.recall import primitives


def expansion_terms(query: str, docs: list[Mapping[str, int]], n: int) -> list[str]:
    """The `n` terms (`analysis.terms`) held by most of `docs` (at least two of them), the query's
    own left out. Each doc is a text's terms and their counts, in the order it first uses
    them (`primitives.term_counts`, or a hot index's `fulltext.term_counts`).

    The best candidates of a question tend to share the words of its answer's topic
    ("pottery", "kiln") that the question itself does not use; ties go to the word
    used more often, then to the first seen.
    """
    if n <= 0 or len(docs) < 2:
        return []
    asked = set(primitives.query_terms(query))
    held: Counter = Counter()
    used: Counter = Counter()
    for counts in docs:
        for word, count in counts.items():
            if word in asked or len(word) < 3 or word.isdigit():
                continue
            held[word] += 1
            used[word] += count
    ranked = sorted(held, key=lambda w: (-held[w], -used[w]))
    return [w for w in ranked if held[w] >= 2][:n]
