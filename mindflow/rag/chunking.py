"""Chunks of a document by tokens of the embedding model's tokenizer, never across chapters."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mindflow.rag.parsers import Document

# (text) -> character spans of its tokens, in order.
TokenSpans = Callable[[str], list[tuple[int, int]]]
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*$")
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@dataclass
class Chunk:
    doc_id: str
    ordinal: int  # position of the chunk in its document, from 0
    chapter: str
    chapter_index: int
    text: str
    char_start: int  # offsets in Document.text: text == document.text[char_start:char_end]
    char_end: int
    tokens: int


def word_spans(text: str) -> list[tuple[int, int]]:
    """Words and punctuation marks: the token count of models without a local tokenizer."""
    return [m.span() for m in _WORD.finditer(text)]


def tokenizer_spans(model_name: str) -> tuple[TokenSpans, int | None]:
    """The model's own tokenizer as span function, and its input window in tokens (None if unknown)."""
    from mindflow.embeddings import OPENAI_PREFIX, _load_sentence_transformer

    if model_name.startswith(OPENAI_PREFIX):
        return word_spans, 8191
    model = _load_sentence_transformer(model_name)
    tokenizer = model.tokenizer
    window = getattr(model, "max_seq_length", None)
    # Two places go to the model's [CLS] and [SEP] tokens.
    limit = window - 2 if window else None

    def spans(text: str) -> list[tuple[int, int]]:
        out = tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False,
            verbose=False,
        )  # fmt: skip
        return [(a, b) for a, b in out["offset_mapping"] if b > a]

    return spans, limit


def chunk_document(
    doc_id: str, document: Document, spans: TokenSpans, size: int = 350, overlap: int = 50
) -> list[Chunk]:
    """Windows of `size` tokens sharing `overlap` tokens, cut at a sentence end where one is near.

    Each chapter is chunked on its own, so no chunk holds the end of one chapter and the
    start of the next.
    """
    if size < 1:
        raise ValueError("chunk size must be at least one token")
    overlap = max(0, min(overlap, size // 2))
    chunks: list[Chunk] = []
    for index, chapter in enumerate(document.chapters):
        tokens = spans(chapter.text)
        start = 0
        while start < len(tokens):
            end = min(start + size, len(tokens))
            if end < len(tokens):
                end = _sentence_cut(chapter.text, tokens, start, end, size)
            a, b = tokens[start][0], tokens[end - 1][1]
            chunks.append(
                Chunk(
                    doc_id=doc_id,
                    ordinal=len(chunks),
                    chapter=chapter.title,
                    chapter_index=index,
                    text=chapter.text[a:b],
                    char_start=chapter.start + a,
                    char_end=chapter.start + b,
                    tokens=end - start,
                )
            )
            if end >= len(tokens):
                break
            start = max(end - overlap, start + 1)
    return chunks


def _sentence_cut(text: str, tokens: list[tuple[int, int]], start: int, end: int, size: int) -> int:
    """The last sentence end within the window's final quarter, else the window's end."""
    earliest = start + max(1, (3 * size) // 4)
    for i in range(end - 1, earliest - 1, -1):
        a, b = tokens[i]
        # A full stop, maybe inside closing quotes, then a space.
        if _SENTENCE_END.search(text[max(a, b - 4) : b]) and (i + 1 >= len(tokens) or tokens[i + 1][0] > b):
            return i + 1
    return end
