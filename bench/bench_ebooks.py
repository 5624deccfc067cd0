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
    ("a precious blue gem is discovered inside the crop of a Christmas goose", "Blue Carbuncle"),
    ("a deadly swamp adder climbs down a dummy bell-pull to the bed of the sleeper", "Speckled Band"),
    ("an engineer's thumb is cut off by a cleaver as he escapes a hydraulic press", "Engineer"),
    ("the missing gentleman earned his living disguised as a beggar near the opium den", "Twisted Lip"),
    ("the woman outwits Holmes and keeps the photograph that compromises the king", "Scandal in Bohemia"),
]


def _norm(value: str) -> str:
    return unicodedata.normalize("NFKC", value).replace("’", "'").lower()


def main() -> int:
    if not DATASET.is_dir():
        print(f"skipped: {DATASET} not found (the shared datasets sit beside the project)")
        return 0
    home = Path(tempfile.mkdtemp(prefix="mindflow-ebooks-"))
    os.environ["MINDFLOW_HOME"] = str(home)
    from mindflow import lance, store
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.rag.hybrid import open_chunks, search_chunks
    from mindflow.rag.index import TABLE, ReindexParams, reindex

    settings = load_settings()
    folder = settings.ebooks
    folder.mkdir(parents=True)
    for path in sorted(DATASET.iterdir()):
        shutil.copy2(path, folder / path.name)
    embedder = Embedder(model=settings.embedding_model, batch_size=settings.embedding_batch_size)
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

    run("no-change reindex")
    for path in folder.iterdir():
        os.utime(path)
    run("touched, content unchanged")
    txt = folder / "pride-and-prejudice.txt"
    text = txt.read_text(encoding="utf-8")
    marker = "It is a truth universally acknowledged"
    txt.write_text(text.replace(marker, "It is, as everyone knows, a truth universally acknowledged", 1))
    one = run("one document edited")
    print(
        f"  re-processed: {', '.join(one.changed)}; embedded {one.embedded} of its "
        f"{one.chunks_by_document.get(txt.name, 0)} chunks (the rest from the embedding cache)"
    )

    table = open_chunks(settings.lance_path)
    hits = 0
    started = time.perf_counter()
    for query, chapter in LOOKUPS:
        found = search_chunks(table, query, embedder.encode([query])[0], TOP)
        ok = any(_norm(chapter) in _norm(h.chapter) for h in found)
        hits += ok
        shown = "; ".join(f"{h.title[:22]} / {h.chapter[:34]}" for h in found)
        print(f"  {'hit ' if ok else 'MISS'} {chapter:<22} <- {query[:60]!r}: {shown}")
    seconds = (time.perf_counter() - started) / len(LOOKUPS)
    print(f"passage look-ups: {hits}/{len(LOOKUPS)} with the chapter in the top {TOP}", end="")
    print(f" ({seconds * 1000:.0f} ms per search)")
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
