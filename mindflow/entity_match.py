"""Finding a being's entities from loose names, with no model: for `GET facts` and resonance.

A name resolves, in order:
1. through an alias (`Bob` -> `Robert Smith`), or to an entity key as written (case and
   spacing aside): what `graph.neighbourhood` always did;
2. by its normalised form: accents, punctuation and a possessive `'s` dropped
   (`Zoë's` -> `zoe`, `acme-corp` -> `acme corp`);
3. by its words: the entity whose words contain the name's (or the reverse) with the
   largest share in common (`Smith` -> `Robert Smith`); ties go to the entity with more rows.

`mentions` finds the entities a sentence names (resonance's phase 2): every entity or
alias whose normalised words appear in a row in the sentence, longest first.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

# Words too common to name an entity on their own.
STOPWORDS = frozenset(
    "a an and are as at be but by de del der des di do does for from has have he her his how i in "
    "is it its la le me my no not of on or our she so that the their them they this to was we what "
    "when where which who why will with you your".split()
)
MIN_WORD = 3  # a one-word name shorter than this is never matched inside a sentence
_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s\b", re.UNICODE)


def normalise(name: str) -> str:
    """Lower case, accents and punctuation removed, possessive `'s` dropped, single spaces."""
    text = unicodedata.normalize("NFKD", name or "")
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = _POSSESSIVE.sub("", text.lower())
    return " ".join(_NON_WORD.sub(" ", text).replace("_", " ").split())


def words(name: str) -> tuple[str, ...]:
    return tuple(normalise(name).split())


@dataclass
class EntityIndex:
    """A being's entity keys with every name they are known by (spellings and aliases)."""

    names: dict[str, set[str]] = field(default_factory=dict)  # entity key -> names
    rows: Counter = field(default_factory=Counter)  # entity key -> facts and relations naming it
    _forms: dict[str, set[str]] | None = None  # normalised name -> entity keys, built on first use

    def add(self, key: str, name: str, rows: int = 0) -> None:
        if not key:
            return
        self.names.setdefault(key, set()).add(name or key)
        self.names[key].add(key)
        self.rows[key] += rows
        self._forms = None

    def _by_normalised(self) -> dict[str, set[str]]:
        if self._forms is None:
            out: dict[str, set[str]] = {}
            for key, names in self.names.items():
                for name in names:
                    form = normalise(name)
                    if form:
                        out.setdefault(form, set()).add(key)
            self._forms = out
        return self._forms

    def _best(self, keys) -> str:
        return min(keys, key=lambda k: (-self.rows[k], k))

    def resolve(self, name: str) -> tuple[str, str] | None:
        """(entity key, how: `normalised` | `words`), or None when nothing is close enough."""
        form = normalise(name)
        if not form:
            return None
        exact = self._by_normalised().get(form)
        if exact:
            return self._best(exact), "normalised"
        query = set(form.split()) - STOPWORDS
        if not query:
            return None
        scored: dict[str, float] = {}
        for key, names in self.names.items():
            for candidate in names:
                own = set(words(candidate)) - STOPWORDS
                if not own or not (query <= own or own <= query):
                    continue
                share = len(query & own) / len(query | own)
                scored[key] = max(scored.get(key, 0.0), share)
        if not scored:
            return None
        top = max(scored.values())
        return self._best([k for k, v in scored.items() if v == top]), "words"

    def mentions(self, sentence: str, limit: int = 3) -> list[str]:
        """Entity keys the sentence names, in the order it names them (at most `limit`)."""
        said = words(sentence)
        if not said:
            return []
        named: dict[tuple[str, ...], str] = {}
        for form, keys in self._by_normalised().items():
            seq = tuple(form.split())
            if len(seq) == 1 and (len(seq[0]) < MIN_WORD or seq[0] in STOPWORDS):
                continue
            named[seq] = self._best(keys)
        # Longest names first, so "Robert Smith" is found before "Smith" claims its word.
        lengths = sorted({len(seq) for seq in named if len(seq) <= len(said)}, reverse=True)
        taken = [False] * len(said)
        found: dict[str, int] = {}
        for n in lengths:
            for start in range(len(said) - n + 1):
                key = named.get(said[start : start + n])
                if key is None or any(taken[start : start + n]):
                    continue
                taken[start : start + n] = [True] * n
                found[key] = min(found.get(key, start), start)
        return sorted(found, key=lambda k: (found[k], k))[:limit]
