"""Ebook reindex on ../shared/datasets/ebooks: full, no-change and one-document reindex, beside the
raw embedding time of the same chunks, and the hit rate of paraphrased passage look-ups."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATASET = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "ebooks"
TOP = 3
# A distinctive passage of each book in other words, and the chapter that holds it.
LOOKUPS = [
    ("a wealthy unmarried man is generally assumed to be looking for a wife", "Chapter 1"),
    ("he finds her merely passable and not pretty enough to tempt him onto the dance floor", "Chapter 3"),
    ("the clergyman cousin asks Elizabeth to marry him and she turns him down", "Chapter 19"),
    ("Darcy confesses that he struggled in vain against his ardent love for her", "Chapter 34"),
    ("a letter from Jane says the youngest sister has run off with Wickham", "Chapter 46"),
    ("the haughty aunt drives over to forbid Elizabeth from ever accepting her nephew", "Chapter 56"),
    ("men with flaming red hair are paid to copy out the encyclopaedia by hand", "The Redheaded League"),
    (
        "a precious blue gem is discovered inside the crop of a Christmas goose",
        "The Adventure of the Blue Carbuncle",
    ),
    (
        "a deadly swamp adder climbs down a dummy bell-pull to the bed of the sleeper",
        "The Adventure of the Speckled Band",
    ),
    (
        "an engineer's thumb is cut off by a cleaver as he escapes a hydraulic press",
        "The Adventure of the Engineer's Thumb",
    ),
    (
        "the missing gentleman earned his living disguised as a beggar near the opium den",
        "The Man with the Twisted Lip",
    ),
    (
        "the woman outwits Holmes and keeps the photograph that compromises the king",
        "A Scandal in Bohemia",
    ),
]
# The same look-ups through one retriever only: the baseline the hybrid fusion has to beat.
RETRIEVERS = {"hybrid": (1.0, 1.0), "vector only": (1.0, 0.0), "full-text only": (0.0, 1.0)}
NO_CHANGE_TARGET_S = 1.0


def _norm(value: str) -> str:
    """A chapter name compared whole: same Unicode form, quotes, case, spacing and no end dot."""
    value = unicodedata.normalize("NFKC", value).replace("\u2019", "'").replace("\u2018", "'")
    return " ".join(value.lower().split()).rstrip(".")


def chapter_matches(expected: str, chapter: str) -> bool:
    """Exact match of normalised names: "Chapter 1" is not "Chapter 10"."""
    return _norm(expected) == _norm(chapter)


def _chunk_texts(db, doc_id: str) -> set[str]:
    """The text hashes of one document's chunks in `ebook_chunks`."""
    from mindflow.rag.index import TABLE

    rows = db.open_table(TABLE).search().select(["doc_id", "text_sha256"]).limit(None).to_arrow()
    ids, hashes = rows.column("doc_id").to_pylist(), rows.column("text_sha256").to_pylist()
    return {sha for doc, sha in zip(ids, hashes, strict=True) if doc == doc_id}


def main() -> int:
    if not DATASET.is_dir():
        print(f"skipped: {DATASET} not found (the shared datasets sit beside the project)")
        return 0
    home = Path(tempfile.mkdtemp(prefix="mindflow-ebooks-"))
    os.environ["MINDFLOW_HOME"] = str(home)
    from mindflow import lance, store
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.rag.hybrid import SearchConfig, open_chunks, search_chunks
    from mindflow.rag.index import TABLE, ReindexParams, reindex

    settings = load_settings()
    folder = settings.ebooks
    folder.mkdir(parents=True)
    for path in sorted(DATASET.iterdir()):
        shutil.copy2(path, folder / path.name)
    embedder = Embedder.for_settings(settings)  # the encoder `mindflow ebooks reindex` uses
    embedder.encode(["load the model before timing"])
    params = ReindexParams.from_settings(settings)
    db = lance.connect(settings.lance_path)

    def run(label: str):
        with store.connect(settings.duckdb_path) as con:
            report = reindex(con, db, folder, embedder, params)
        print(
            f"{label:<28} {report.seconds:8.2f} s  new={len(report.new)} changed={len(report.changed)} "
            f"removed={len(report.removed)} unchanged={report.unchanged} failed={len(report.failed)} "
            f"embedded={report.embedded} cached={report.cached} chunks={report.chunks}"
        )
        return report

    print(f"dataset: {', '.join(p.name for p in sorted(folder.iterdir()))}")
    full = run("full reindex (empty cache)")
    texts = db.open_table(TABLE).search().select(["text"]).limit(None).to_arrow().column("text").to_pylist()
    started = time.perf_counter()
    Embedder(model=settings.embedding_model, batch_size=settings.embedding_batch_size).encode(texts)
    raw = time.perf_counter() - started
    print(f"{'raw embedding, same chunks':<28} {raw:8.2f} s  ({len(texts)} texts, no parsing, no cache)")
    print(f"  reindex / raw embedding: {full.seconds / raw:.2f}x; chunk length {full.chunk_tokens} tokens")
    print("chunks per document:")
    for doc_id, n in sorted(full.chunks_by_document.items()):
        print(f"  {doc_id:<40} {n:6d}")
    for doc_id, reason in full.failed.items():
        print(f"  {doc_id:<40} failed: {reason}")

    quiet = run("no-change reindex")
    for path in folder.iterdir():
        os.utime(path)
    touched = run("touched, content unchanged")
    for label, report in (("no-change", quiet), ("touched", touched)):
        met = report.seconds < NO_CHANGE_TARGET_S and report.changes == 0 and report.embedded == 0
        print(
            f"  {label}: {report.seconds:.3f} s of work, {report.changes} documents re-processed, "
            f"{report.embedded} embedded (target: < {NO_CHANGE_TARGET_S:.0f} s, nothing re-processed): "
            f"{'met' if met else 'MISSED'}"
        )
    txt = folder / "pride-and-prejudice.txt"
    before = _chunk_texts(db, txt.name)
    text = txt.read_text(encoding="utf-8")
    marker = "It is a truth universally acknowledged"
    txt.write_text(text.replace(marker, "It is, as everyone knows, a truth universally acknowledged", 1))
    one = run("one document edited")
    new_texts = _chunk_texts(db, txt.name) - before
    met = one.changed == [txt.name] and not one.new and not one.removed and one.embedded <= len(new_texts)
    print(
        f"  re-processed: {', '.join(one.changed)}; embedded {one.embedded} of its "
        f"{one.chunks_by_document.get(txt.name, 0)} chunks, {len(new_texts)} of which have new text "
        f"(target: only {txt.name} re-processed, only its new chunks embedded): {'met' if met else 'MISSED'}"
    )

    table = open_chunks(settings.lance_path)
    hits = dict.fromkeys(RETRIEVERS, 0)
    seconds = 0.0
    for query, chapter in LOOKUPS:
        vector = embedder.encode([query])[0]
        marks = []
        for name, (vector_weight, text_weight) in RETRIEVERS.items():
            config = SearchConfig(vector_weight=vector_weight, text_weight=text_weight)
            started = time.perf_counter()
            found = search_chunks(table, query, vector, TOP, config)
            if name == "hybrid":
                seconds += time.perf_counter() - started
                shown = "; ".join(f"{h.title[:22]} / {h.chapter[:34]}" for h in found)
            ok = any(chapter_matches(chapter, h.chapter) for h in found)
            hits[name] += ok
            marks.append("+" if ok else "-")
        print(f"  {''.join(marks)} {chapter[:30]:<30} <- {query[:56]!r}: {shown}")
    print(f"  (+/- per look-up: {', '.join(RETRIEVERS)})")
    summary = ", ".join(f"{name} {hits[name]}/{len(LOOKUPS)}" for name in RETRIEVERS)
    print(f"passage look-ups with the exact chapter in the top {TOP}: {summary}", end="")
    print(f" ({seconds / len(LOOKUPS) * 1000:.0f} ms per hybrid search, query embedding excluded)")
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
