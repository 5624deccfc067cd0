"""Words as the full-text index counts them, for every BM25 recall computes itself.

The index's analysis is `lancedb.index.FTS`'s defaults: its simple tokenizer, lower case and
ASCII folding, its English Snowball stemmer (the `snowballstemmer` package implements the
same Porter2 algorithm), then its English stop words, which it checks on the stemmed word (so
"was" is dropped and "does", stemmed "doe", is kept: found by asking LanceDB's index word by
word). The hot index's postings (`fulltext`), the fresh tail's BM25 and the ranking levers
(`feedback`, `rerank.local_bm25`) all count words this way, so "cooked" answers "cooking"
wherever a memory is scored.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_local = threading.local()


def _stemmer():
    # One per thread: a snowballstemmer stemmer keeps the word it is stemming in itself, so two
    # threads sharing one (requests, the index builder) raised IndexError or stemmed a word wrong.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


# The English stop words of the full-text index (NLTK's list, as LanceDB's tokenizer has it).
STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing a an
    the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now d ll m o re ve y ain aren couldn
    didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn""".split()
)


def fts_tokens(text: str) -> list[str]:
    """A text's words as the full-text index's simple tokenizer splits them, lower case, ASCII-folded."""
    text = (text or "").lower()
    # Most texts are ASCII: nothing to fold (the per-character pass is most of the cost).
    folded = (
        text
        if text.isascii()
        else "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    )
    return [w for w in _TOKEN.findall(folded) if len(w) <= 40]


@lru_cache(maxsize=500_000)
def term(token: str) -> str:
    """A token's term: stemmed, "" for a stop word (checked after stemming, as LanceDB does)."""
    stemmed = _stemmer().stemWord(token)
    return "" if stemmed in STOP_WORDS else stemmed


def terms(text: str) -> list[str]:
    """A text's words as the full-text index keeps them: tokens, stemmed, stop words out."""
    return [t for t in map(term, fts_tokens(text)) if t]
