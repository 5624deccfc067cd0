"""Ebook RAG: parsers on files the tests write, chunking, the incremental reindex, search, the sensor.

Real DuckDB and LanceDB in tmp folders, the real MiniLM model and tokenizer.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from mindflow import lance, store
from mindflow.rag.chunking import chunk_document, tokenizer_spans, word_spans
from mindflow.rag.hybrid import search_chunks
from mindflow.rag.index import TABLE, ReindexParams, reindex
from mindflow.rag.parsers import DocumentError, parse_document

EBOOKS = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "ebooks"

# --- documents the tests write -------------------------------------------------------------------

KEEPER = {
    "Chapter 1": (
        "The keeper climbed the spiral stair of the lighthouse every evening at dusk. "
        "He polished the great brass lens with a soft cloth until it gleamed like water. "
        "Then he trimmed the wick, filled the oil reservoir and lit the lamp that warned the ships. "
        "Gulls circled the gallery while he wrote the weather in his logbook."
    ),
    "Chapter 2": (
        "In the winter gale a fishing schooner struck the reef below the cliffs. "
        "The keeper rowed out through breaking waves and pulled three half-drowned sailors into his boat. "
        "They spent the night by his stove, wrapped in blankets, drinking hot tea with rum. "
        "At dawn the storm passed and the wreck lay broken on the rocks."
    ),
    "Chapter 3": (
        "When spring came the keeper planted tomatoes and beans in a sheltered garden behind the tower. "
        "Salt wind burned the leaves, so he built a wall of driftwood and flat stones. "
        "By August the vines were heavy with red fruit that he traded for flour in the village."
    ),
}


def gutenberg_text(title: str, author: str, chapters: dict[str, str]) -> str:
    body = "\n\n".join(f"{heading}\n\n{text}" for heading, text in chapters.items())
    return (
        f"The Project Gutenberg EBook of {title}, by {author}\n\n"
        "This eBook is for the use of anyone anywhere at no cost and with\nalmost no restrictions whatsoever.\n\n"
        f"Title: {title}\n\nAuthor: {author}\n\nRelease Date: May 1, 2026 [EBook #99999]\n\n"
        f"*** START OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n\n\n"
        "Produced by Volunteers of the Distributed Proofreading Team\n\n\n\n"
        f"{title.upper()}\n\nBy {author}\n\n\n{body}\n\n\n"
        f"*** END OF THIS PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n"
        "***** This file should be named 99999-0.txt *****\n\n"
        "Section 1. General Terms of Use and Redistributing Project Gutenberg-tm electronic works\n"
        "The Foundation's EIN or federal tax identification number is 64-6221541.\n"
    )


VOYAGES = {
    "The Frozen Sea": (
        "<p>Our ship pushed north until the pack ice closed around the hull.</p>"
        "<p>Penguins watched from the floes as the crew sawed a channel through the frozen sea, "
        "and at night the aurora painted green curtains across the sky.</p>"
    ),
    "The Desert Crossing": (
        "<p>The caravan left the oasis before sunrise with forty camels.</p>"
        "<p>For nine days we crossed the dunes, rationing water from goatskin bags, "
        "until the minarets of the trading city rose out of the heat haze.</p>"
    ),
}


def _zip_epub(path, files: dict[str, str]):
    """An EPUB container: the stored mimetype, the container pointing at EPUB/content.opf, the files."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="EPUB/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        for name, content in files.items():
            z.writestr(name, content)
    return path


def make_epub(path: Path, title: str, author: str, chapters: dict[str, str], *, nav: bool = True) -> Path:
    """A minimal valid EPUB 3: container, OPF, a nav document and one XHTML file per chapter."""
    items, spine, links = [], [], []
    files = {}
    files["EPUB/title.xhtml"] = (
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
        f'<head><title>Title</title></head><body epub:type="frontmatter titlepage"><h1>{title}</h1>'
        f"<p>{author}</p></body></html>"
    )
    items.append('<item id="title" href="title.xhtml" media-type="application/xhtml+xml"/>')
    spine.append('<itemref idref="title"/>')
    for i, (heading, html) in enumerate(chapters.items(), 1):
        files[f"EPUB/text/ch{i}.xhtml"] = (
            '<?xml version="1.0" encoding="utf-8"?>'
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
            f'<head><title>{heading}</title></head><body epub:type="bodymatter"><section epub:type="chapter">'
            f"<h2>{heading}</h2>{html}</section></body></html>"
        )
        items.append(f'<item id="ch{i}" href="text/ch{i}.xhtml" media-type="application/xhtml+xml"/>')
        spine.append(f'<itemref idref="ch{i}"/>')
        links.append(f'<li><a href="text/ch{i}.xhtml">{heading}</a></li>')
    if nav:
        files["EPUB/nav.xhtml"] = (
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><body>'
            f'<nav epub:type="toc"><ol>{"".join(links)}</ol></nav></body></html>'
        )
        items.append('<item id="nav" href="nav.xhtml" properties="nav" media-type="application/xhtml+xml"/>')
    files["EPUB/content.opf"] = (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="uid">urn:test:{title}</dc:identifier><dc:title>{title}</dc:title>'
        f"<dc:creator>{author}</dc:creator><dc:language>en</dc:language></metadata>"
        f"<manifest>{''.join(items)}</manifest><spine>{''.join(spine)}</spine></package>"
    )
    return _zip_epub(path, files)


def make_pdf(path: Path, pages: list[str], title: str = "", author: str = "") -> Path:
    """A PDF with a real text layer (Helvetica text objects), written object by object."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    n = len(pages)
    objs = {
        1: "<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{' '.join(f'{4 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>",
        3: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i, text in enumerate(pages):
        lines = " ".join(f"({esc(line)}) Tj T*" for line in text.split("\n"))
        stream = f"BT /F1 10 Tf 14 TL 40 780 Td {lines} ET"
        objs[4 + 2 * i] = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
        )
        objs[5 + 2 * i] = f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream"
    info = 4 + 2 * n
    objs[info] = f"<< /Title ({esc(title)}) /Author ({esc(author)}) >>"
    out = b"%PDF-1.4\n"
    offsets = {}
    for num in sorted(objs):
        offsets[num] = len(out)
        out += f"{num} 0 obj\n{objs[num]}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {info + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offsets[i]:010d} 00000 n \n".encode() for i in range(1, info + 1))
    out += (
        f"trailer\n<< /Size {info + 1} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    path.write_bytes(out)
    return path


def write_library(folder: Path) -> Path:
    """Five readable documents (one per format) and three that cannot be indexed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "keeper.txt").write_text(gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER))
    (folder / "bees.md").write_text(
        "---\ntitle: Field Notes on Bees\nauthor: Bram Stoker\n---\n\n# Field Notes on Bees\n\n"
        "## Swarming\n\nIn May the old queen left the hive with half the workers and hung in a buzzing "
        "cluster from the apple bough until the scouts found a hollow oak.\n\n"
        "## Honey Harvest\n\nIn September we lifted the supers, uncapped the comb with a warm knife and "
        "spun the frames in the extractor until amber honey ran into the buckets.\n"
    )
    (folder / "kitchen.html").write_text(
        "<html><head><title>Kitchen Chemistry</title><meta name='author' content='Cora Baker'></head><body>"
        "<h1>Kitchen Chemistry</h1>"
        "<h2>Bread</h2><p>Yeast eats the sugars in the dough and breathes out carbon dioxide, "
        "so the loaf rises in a warm corner of the kitchen before baking.</p>"
        "<h2>Caramel</h2><p>Heated past one hundred and sixty degrees, white sugar melts and browns "
        "into bitter-sweet caramel that hardens as it cools on the marble slab.</p>"
        "<script>var ignored = 'no script text in the index';</script></body></html>"
    )
    make_epub(folder / "voyages.epub", "Voyages", "Dora Explorer", VOYAGES)
    make_pdf(
        folder / "clocks.pdf",
        [
            "Chapter 1\nThe clockmaker filed the brass escapement wheel by candlelight.\n"
            "Every tooth had to match or the pendulum would stop at midnight.",
            "Chapter 2\nA cuckoo clock from the Black Forest hung above the workbench,\n"
            "its wooden bird calling the hours to the sleeping town.",
        ],
        title="On Clocks",
        author="Eli Whitney",
    )
    (folder / "broken.epub").write_bytes(zipfile_bytes_truncated())
    _blank_pdf(folder / "scanned.pdf")
    (folder / "empty.txt").write_text("   \n\n")
    return folder


def zipfile_bytes_truncated() -> bytes:
    """The first half of a real EPUB: a zip whose central directory is missing."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"mindflow-broken-{os.getpid()}.epub"
    make_epub(tmp, "Broken", "Nobody", VOYAGES)
    data = tmp.read_bytes()
    tmp.unlink()
    return data[: len(data) // 2]


def _blank_pdf(path: Path) -> Path:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(612, 792)
    writer.add_blank_page(612, 792)
    with path.open("wb") as handle:
        writer.write(handle)
    return path


# --- parsers -------------------------------------------------------------------------------------


def test_plain_text_strips_gutenberg_and_keeps_chapters(tmp_path):
    path = tmp_path / "keeper.txt"
    path.write_text(gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER))
    doc = parse_document(path)
    assert (doc.title, doc.author, doc.format) == ("The Lighthouse Keeper", "Ada Lovelace", "text")
    assert [c.title for c in doc.chapters if c.title] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert "Project Gutenberg" not in doc.text and "EIN" not in doc.text and "Produced by" not in doc.text
    assert doc.chapters[-1].text.endswith("traded for flour in the village.")
    for chapter in doc.chapters:
        assert doc.text[chapter.start : chapter.start + len(chapter.text)] == chapter.text


def test_markdown_front_matter_and_headings(tmp_path):
    folder = write_library(tmp_path / "lib")
    doc = parse_document(folder / "bees.md")
    assert (doc.title, doc.author) == ("Field Notes on Bees", "Bram Stoker")
    assert [c.title for c in doc.chapters] == ["Swarming", "Honey Harvest"]
    assert "#" not in doc.text


def test_html_chapters_without_script_text(tmp_path):
    folder = write_library(tmp_path / "lib")
    doc = parse_document(folder / "kitchen.html")
    assert (doc.title, doc.author, doc.format) == ("Kitchen Chemistry", "Cora Baker", "html")
    assert [c.title for c in doc.chapters] == ["Bread", "Caramel"]
    assert "ignored" not in doc.text


def test_gutenberg_html_header_and_license_removed(tmp_path):
    header = "<pre>The Project Gutenberg EBook of Tides, by Ann Sea\n\nTitle: Tides\n\nAuthor: Ann Sea\n\n"
    html = (
        f"<html><head><title>The Project Gutenberg eBook of Tides</title></head><body>{header}"
        "*** START OF THIS PROJECT GUTENBERG EBOOK TIDES ***\n</pre>"
        "<h2>Chapter 1</h2><p>The moon pulls the ocean into a bulge twice a day.</p>"
        "<pre>*** END OF THIS PROJECT GUTENBERG EBOOK TIDES ***\n</pre>"
        "<p>Section 1. General Terms of Use of Project Gutenberg-tm electronic works</p></body></html>"
    )
    (tmp_path / "tides.html").write_text(html)
    doc = parse_document(tmp_path / "tides.html")
    assert (doc.title, doc.author) == ("Tides", "Ann Sea")
    assert doc.text == "The moon pulls the ocean into a bulge twice a day."
    assert doc.chapters[0].title == "Chapter 1"


def test_epub_title_author_and_chapters_from_nav(tmp_path):
    doc = parse_document(make_epub(tmp_path / "v.epub", "Voyages", "Dora Explorer", VOYAGES))
    assert (doc.title, doc.author, doc.format) == ("Voyages", "Dora Explorer", "epub")
    # The title page is front matter, not a chapter.
    assert [c.title for c in doc.chapters] == ["The Frozen Sea", "The Desert Crossing"]
    assert doc.chapters[0].text.startswith("Our ship pushed north")
    assert "Frozen Sea" not in doc.chapters[0].text  # the heading is the chapter's title, not its text


def test_epub_without_nav_takes_headings(tmp_path):
    doc = parse_document(make_epub(tmp_path / "v.epub", "Voyages", "Dora", VOYAGES, nav=False))
    assert [c.title for c in doc.chapters] == ["The Frozen Sea", "The Desert Crossing"]


def test_epub_with_gutenberg_text_markers_keeps_only_the_book(tmp_path):
    """Older Gutenberg EPUBs carry the plain-text START/END lines and the license in their XHTML."""
    chapters = {
        "The Project Gutenberg EBook of Voyages": (
            "<p>This eBook is for the use of anyone anywhere at no cost and with almost no restrictions.</p>"
            "<pre>Title: Voyages\n\nAuthor: Dora Explorer\n\nRelease Date: May 1, 2026 [EBook #99998]\n\n"
            "*** START OF THIS PROJECT GUTENBERG EBOOK VOYAGES ***\n</pre>"
            "<p>Produced by Volunteers of the Distributed Proofreading Team</p>"
        ),
        **VOYAGES,
        "Full License": (
            "<p>End of the Project Gutenberg EBook of Voyages, by Dora Explorer</p>"
            "<p>*** END OF THIS PROJECT GUTENBERG EBOOK VOYAGES ***</p>"
            "<p>Section 1. General Terms of Use and Redistributing Project Gutenberg-tm electronic works</p>"
        ),
        "Donations": "<p>The Foundation's EIN or federal tax identification number is 64-6221541.</p>",
    }
    doc = parse_document(make_epub(tmp_path / "old-gutenberg.epub", "Voyages", "Dora Explorer", chapters))
    assert [c.title for c in doc.chapters] == ["The Frozen Sea", "The Desert Crossing"]
    assert "Gutenberg" not in doc.text and "START OF" not in doc.text and "Produced by" not in doc.text
    assert "General Terms" not in doc.text and "EIN" not in doc.text and "Full License" not in doc.text
    assert doc.text.startswith("Our ship pushed north") and doc.text.endswith("out of the heat haze.")
    assert (doc.title, doc.author) == ("Voyages", "Dora Explorer")
    # The same markers in one file, between paragraphs of a chapter.
    one = {
        "Voyages": chapters["The Project Gutenberg EBook of Voyages"]
        + VOYAGES["The Frozen Sea"]
        + "<p>*** END OF THE PROJECT GUTENBERG EBOOK VOYAGES ***</p><p>Project Gutenberg-tm license</p>"
    }
    doc = parse_document(make_epub(tmp_path / "one.epub", "Voyages", "Dora Explorer", one))
    assert doc.text.startswith("Our ship pushed north") and doc.text.endswith("across the sky.")


def make_one_file_epub(path: Path, toc: str, body: str, *, ncx: str | None = None) -> Path:
    """An EPUB whose whole text is one XHTML file (`EPUB/text/book.xhtml`), the chapters anchors
    in it: `toc` is the nav's list markup, or with `ncx` the navMap of an EPUB 2 NCX instead."""
    files = {
        "EPUB/text/book.xhtml": (
            '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
            f"<head><title>Voyages</title></head><body>{body}</body></html>"
        )
    }
    items = ['<item id="book" href="text/book.xhtml" media-type="application/xhtml+xml"/>']
    if ncx is None:
        files["EPUB/nav.xhtml"] = (
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><body>'
            f'<nav epub:type="toc">{toc}</nav></body></html>'
        )
        items.append('<item id="nav" href="nav.xhtml" properties="nav" media-type="application/xhtml+xml"/>')
    else:
        files["EPUB/toc.ncx"] = (
            '<?xml version="1.0" encoding="utf-8"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
            f'version="2005-1"><navMap>{ncx}</navMap></ncx>'
        )
        items.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
    files["EPUB/content.opf"] = (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="uid">urn:test:one</dc:identifier>'
        "<dc:title>Voyages</dc:title><dc:creator>Dora Explorer</dc:creator></metadata>"
        f'<manifest>{"".join(items)}</manifest><spine><itemref idref="book"/></spine></package>'
    )
    return _zip_epub(path, files)


ONE_FILE_BODY = (
    "<h1>Voyages</h1><p>A book of two journeys.</p>"
    '<div class="chapter"><h2 id="ch1">I. The Frozen Sea</h2>' + VOYAGES["The Frozen Sea"] + "</div>"
    '<div class="chapter"><h2><a id="ch2"></a>II. The Desert Crossing</h2>'
    + VOYAGES["The Desert Crossing"]
    + "</div>"
)


@pytest.mark.parametrize("toc_kind", ["nav", "ncx"])
def test_epub_file_holding_several_chapters_is_split_at_their_anchors(tmp_path, toc_kind, embedder):
    nav = (
        '<ol><li><a href="text/book.xhtml#ch1">The Frozen Sea</a></li>'
        '<li><a href="text/book.xhtml#ch2">The Desert Crossing</a></li></ol>'
    )
    ncx = (
        '<navPoint id="n1" playOrder="1"><navLabel><text>The Frozen Sea</text></navLabel>'
        '<content src="text/book.xhtml#ch1"/></navPoint>'
        '<navPoint id="n2" playOrder="2"><navLabel><text>The Desert Crossing</text></navLabel>'
        '<content src="text/book.xhtml#ch2"/></navPoint>'
    )
    path = make_one_file_epub(
        tmp_path / "one-file.epub", nav, ONE_FILE_BODY, ncx=ncx if toc_kind == "ncx" else None
    )
    doc = parse_document(path)
    assert [c.title for c in doc.chapters] == ["Voyages", "The Frozen Sea", "The Desert Crossing"]
    front, frozen, desert = doc.chapters
    assert front.text == "A book of two journeys."
    assert "penguins" in frozen.text.lower() and "camels" not in frozen.text
    assert "camels" in desert.text and "penguins" not in desert.text.lower()
    assert "I. The Frozen Sea" in frozen.text and "II. The Desert Crossing" in desert.text  # their headings
    assert all(doc.text[c.start : c.start + len(c.text)] == c.text for c in doc.chapters)
    # Chunks stay inside one chapter each.
    spans, _ = tokenizer_spans(embedder.model)
    chunks = chunk_document("one-file.epub", doc, spans, 24, 4)
    assert {c.chapter for c in chunks} == {"Voyages", "The Frozen Sea", "The Desert Crossing"}
    for c in chunks:
        assert ("camels" in c.text) <= (c.chapter == "The Desert Crossing")
        assert ("Penguins" in c.text) <= (c.chapter == "The Frozen Sea")


def test_epub_toc_parts_nested_under_a_chapter_do_not_split_it(tmp_path):
    nav = (
        '<ol><li><a href="text/book.xhtml">Voyages</a><ol>'
        '<li><a href="text/book.xhtml#ch1">I</a></li><li><a href="text/book.xhtml#ch2">II</a></li>'
        "</ol></li></ol>"
    )
    doc = parse_document(make_one_file_epub(tmp_path / "parts.epub", nav, ONE_FILE_BODY))
    assert [c.title for c in doc.chapters] == ["Voyages"]
    assert "penguins" in doc.text.lower() and "camels" in doc.text


def test_broken_and_encrypted_epub_fail_with_reason(tmp_path):
    broken = tmp_path / "broken.epub"
    broken.write_bytes(zipfile_bytes_truncated())
    with pytest.raises(DocumentError, match="corrupt EPUB"):
        parse_document(broken)
    locked = make_epub(tmp_path / "locked.epub", "Locked", "Nobody", VOYAGES)
    with zipfile.ZipFile(locked, "a") as z:
        z.writestr(
            "META-INF/encryption.xml",
            '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
            '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
            '<enc:CipherData><enc:CipherReference URI="EPUB/text/ch1.xhtml"/></enc:CipherData>'
            "</enc:EncryptedData></encryption>",
        )
    with pytest.raises(DocumentError, match="encrypted EPUB"):
        parse_document(locked)


def test_pdf_text_layer_chapters_and_metadata(tmp_path):
    folder = write_library(tmp_path / "lib")
    doc = parse_document(folder / "clocks.pdf")
    assert (doc.title, doc.author, doc.format) == ("On Clocks", "Eli Whitney", "pdf")
    assert [c.title for c in doc.chapters] == ["Chapter 1", "Chapter 2"]
    assert "brass escapement wheel" in doc.chapters[0].text
    assert "cuckoo clock" in doc.chapters[1].text


def test_pdf_without_text_layer_or_with_password_fails(tmp_path):
    with pytest.raises(DocumentError, match="no text layer"):
        parse_document(_blank_pdf(tmp_path / "scan.pdf"))
    import pypdf

    writer = pypdf.PdfWriter(clone_from=make_pdf(tmp_path / "open.pdf", ["Chapter 1\nSecret text."]))
    writer.encrypt(user_password="s3cret", owner_password="owner", algorithm="RC4-128")
    with (tmp_path / "locked.pdf").open("wb") as handle:
        writer.write(handle)
    with pytest.raises(DocumentError, match="encrypted PDF"):
        parse_document(tmp_path / "locked.pdf")


def test_empty_and_unsupported_files(tmp_path):
    (tmp_path / "empty.md").write_text("\n  \n")
    with pytest.raises(DocumentError, match="empty"):
        parse_document(tmp_path / "empty.md")
    (tmp_path / "headings-only.md").write_text("# One\n\n## Two\n")
    with pytest.raises(DocumentError, match="no text"):
        parse_document(tmp_path / "headings-only.md")
    (tmp_path / "notes.docx").write_bytes(b"PK\x03\x04")
    with pytest.raises(DocumentError, match="unsupported"):
        parse_document(tmp_path / "notes.docx")


def test_table_of_contents_is_not_a_chapter(tmp_path):
    contents = "Contents\n\nChapter 1\nChapter 2\nChapter 3\n\n"
    body = "\n\n".join(f"{h}\n\n{t}" for h, t in KEEPER.items())
    (tmp_path / "k.txt").write_text(f"The Keeper\n\n{contents}{body}")
    doc = parse_document(tmp_path / "k.txt")
    assert [c.title for c in doc.chapters] == ["", "Chapter 1", "Chapter 2", "Chapter 3"]
    # The contents list names the chapters but holds none of their text.
    assert doc.chapters[1].text.startswith("The keeper climbed") and doc.chapters[1].text.endswith("logbook.")
    assert "Chapter" not in doc.chapters[0].text


# --- chunking ------------------------------------------------------------------------------------


def test_chunks_respect_chapters_sizes_overlap_and_offsets(tmp_path, embedder):
    path = tmp_path / "keeper.txt"
    path.write_text(gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER))
    doc = parse_document(path)
    spans, window = tokenizer_spans(embedder.model)
    assert window == 254  # all-MiniLM-L6-v2 reads 256 tokens, two of them [CLS] and [SEP]
    chunks = chunk_document("keeper.txt", doc, spans, size=24, overlap=6)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    by_chapter = {}
    for c in chunks:
        assert doc.text[c.char_start : c.char_end] == c.text
        chapter = doc.chapters[c.chapter_index]
        # Inside its chapter: never across a chapter boundary.
        assert chapter.start <= c.char_start < c.char_end <= chapter.start + len(chapter.text)
        assert c.chapter == chapter.title
        assert 1 <= c.tokens <= 24 and len(spans(c.text)) == c.tokens
        by_chapter.setdefault(c.chapter_index, []).append(c)
    assert len(by_chapter) == len(doc.chapters)
    for pieces in by_chapter.values():
        for a, b in zip(pieces, pieces[1:], strict=False):
            assert b.char_start < a.char_end  # consecutive chunks of a chapter overlap
        # Together they cover the chapter.
        chapter = doc.chapters[pieces[0].chapter_index]
        assert pieces[0].char_start == chapter.start
        assert pieces[-1].char_end == chapter.start + len(chapter.text)


def test_a_chunk_ends_at_a_sentence_end_near_its_window_end():
    from mindflow.rag.parsers import assemble

    doc = assemble(
        "t", None, "text", [("", "One two three four five six seven eight. Nine ten eleven twelve.")]
    )
    first, second = chunk_document("d", doc, word_spans, size=10, overlap=0)
    assert first.text == "One two three four five six seven eight." and first.tokens == 9
    assert second.text == "Nine ten eleven twelve."
    # Without a sentence end in the window's last quarter, the window is cut where it ends.
    doc = assemble("t", None, "text", [("", "One. Two three four five six seven eight nine ten eleven.")])
    assert chunk_document("d", doc, word_spans, size=10, overlap=0)[0].tokens == 10


def test_word_spans_chunking_without_a_model_tokenizer(tmp_path):
    path = tmp_path / "keeper.txt"
    path.write_text(gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER))
    doc = parse_document(path)
    chunks = chunk_document("k", doc, word_spans, size=30, overlap=0)
    assert all(1 <= c.tokens <= 30 for c in chunks)
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in chunks)
    for a, b in zip(chunks, chunks[1:], strict=False):
        if a.chapter_index == b.chapter_index:
            assert b.char_start >= a.char_end  # no overlap asked, none given
    words = sum(len(word_spans(c.text)) for c in doc.chapters)
    assert sum(c.tokens for c in chunks) == words  # every word in exactly one chunk


# --- the incremental reindex --------------------------------------------------------------------

PARAMS = ReindexParams(chunk_tokens=48, chunk_overlap=8, keep_versions=timedelta(days=7))


def _reindex(settings, embedder, params=PARAMS, **kw):
    with store.connect(settings.duckdb_path) as con:
        return reindex(con, lance.connect(settings.lance_path), settings.ebooks, embedder, params, **kw)


def _rows(settings):
    table = lance.connect(settings.lance_path).open_table(TABLE)
    return table.search().select(["doc_id", "ordinal", "write_id", "chapter", "text"]).limit(None).to_arrow()


def test_reindex_indexes_every_format_and_reports_failures(settings, embedder):
    write_library(settings.ebooks)
    seen = []
    report = _reindex(settings, embedder, progress=lambda done, total, doc: seen.append((done, total, doc)))
    assert sorted(report.new) == sorted(
        [
            "keeper.txt",
            "bees.md",
            "kitchen.html",
            "voyages.epub",
            "clocks.pdf",
            "broken.epub",
            "scanned.pdf",
            "empty.txt",
        ]
    )
    assert report.documents == 5
    assert set(report.failed) == {"broken.epub", "scanned.pdf", "empty.txt"}
    assert "corrupt EPUB" in report.failed["broken.epub"]
    assert "no text layer" in report.failed["scanned.pdf"]
    assert "empty" in report.failed["empty.txt"]
    rows = _rows(settings)
    assert rows.num_rows == report.chunks == sum(report.chunks_by_document.values())
    assert set(rows.column("doc_id").to_pylist()) == {
        "keeper.txt",
        "bees.md",
        "kitchen.html",
        "voyages.epub",
        "clocks.pdf",
    }
    keys = list(zip(rows.column("doc_id").to_pylist(), rows.column("ordinal").to_pylist(), strict=False))
    assert len(keys) == len(set(keys))
    assert report.embedded == report.chunks  # a fresh cache embeds every chunk once
    assert seen[0] == (0, 8, seen[0][2]) and seen[-1] == (8, 8, "")
    with store.connect(settings.duckdb_path, read_only=True) as con:
        state = dict(con.execute("SELECT doc_id, status FROM ebook_documents").fetchall())
    assert state["broken.epub"] == "failed" and state["keeper.txt"] == "indexed"


def test_reindex_is_incremental(settings, embedder):
    folder = write_library(settings.ebooks)
    first = _reindex(settings, embedder)
    table = lance.connect(settings.lance_path).open_table(TABLE)
    version = table.version

    again = _reindex(settings, embedder)
    assert (again.new, again.changed, again.removed, again.embedded) == ([], [], [], 0)
    assert again.unchanged == 8 and again.documents == 5 and len(again.failed) == 3
    assert again.chunks == first.chunks and again.version == version  # nothing written

    for path in folder.iterdir():  # touched, not changed
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    touched = _reindex(settings, embedder)
    assert touched.changes == 0 and touched.touched == 8 and touched.version == version

    before = _rows(settings).to_pylist()
    keeper = folder / "keeper.txt"
    keeper.write_text(keeper.read_text().replace("tomatoes and beans", "pumpkins and beans"))
    edited = _reindex(settings, embedder)
    assert edited.changed == ["keeper.txt"] and not edited.new and not edited.removed
    # Only the chunks whose text changed were embedded; the others came from the cache.
    assert 0 < edited.embedded < edited.chunks_by_document["keeper.txt"]
    after = _rows(settings).to_pylist()
    write_ids = lambda rows, doc: {r["write_id"] for r in rows if r["doc_id"] == doc}  # noqa: E731
    assert write_ids(after, "bees.md") == write_ids(before, "bees.md")  # other documents untouched
    assert write_ids(after, "keeper.txt").isdisjoint(write_ids(before, "keeper.txt"))
    assert any("pumpkins" in r["text"] for r in after) and not any("tomatoes" in r["text"] for r in after)
    assert len(after) == len(before)

    (folder / "bees.md").unlink()
    (folder / "broken.epub").unlink()
    removed = _reindex(settings, embedder)
    assert removed.removed == ["bees.md", "broken.epub"]
    assert "bees.md" not in set(_rows(settings).column("doc_id").to_pylist())
    assert set(removed.failed) == {"scanned.pdf", "empty.txt"}

    # A repaired document is indexed; a corrupted one loses its old chunks.
    make_epub(
        folder / "broken.epub", "Mended", "Nobody", {"Repairs": "<p>The binder glued the torn spine.</p>"}
    )
    (folder / "kitchen.html").write_bytes(b"<html><body>   </body></html>")
    mended = _reindex(settings, embedder)
    assert mended.new == ["broken.epub"] and mended.changed == ["kitchen.html"]
    assert "kitchen.html" in mended.failed
    docs = set(_rows(settings).column("doc_id").to_pylist())
    assert "broken.epub" in docs and "kitchen.html" not in docs


def test_changed_chunk_settings_rechunk_everything(settings, embedder):
    write_library(settings.ebooks)
    first = _reindex(settings, embedder)
    smaller = _reindex(settings, embedder, ReindexParams(chunk_tokens=24, chunk_overlap=4))
    assert sorted(smaller.changed) == sorted(first.new) and smaller.chunks > first.chunks
    rows = _rows(settings)
    keys = list(zip(rows.column("doc_id").to_pylist(), rows.column("ordinal").to_pylist(), strict=False))
    assert len(keys) == len(set(keys)) == smaller.chunks


def test_old_versions_kept_for_the_retention_only(settings, embedder):
    folder = write_library(settings.ebooks)
    _reindex(settings, embedder)
    (folder / "bees.md").unlink()
    _reindex(settings, embedder)
    table = lance.connect(settings.lance_path).open_table(TABLE)
    kept = len(table.list_versions())
    assert kept > 2  # creation, one add and delete per document, the removal: rollback possible
    (folder / "kitchen.html").unlink()
    # A retention of 0 is allowed, and LanceDB warns whoever sets it that a reader still on an
    # older version would fail.
    with pytest.warns(UserWarning, match="removes every version except the latest"):
        _reindex(
            settings, embedder, ReindexParams(chunk_tokens=48, chunk_overlap=8, keep_versions=timedelta(0))
        )
    table = lance.connect(settings.lance_path).open_table(TABLE)
    assert len(table.list_versions()) < kept


def test_search_finds_known_passages(settings, embedder):
    write_library(settings.ebooks)
    _reindex(settings, embedder)
    table = lance.connect(settings.lance_path).open_table(TABLE)
    cases = [
        ("rescuing shipwrecked sailors from a storm on the reef", "The Lighthouse Keeper", "Chapter 2"),
        ("growing vegetables behind the tower", "The Lighthouse Keeper", "Chapter 3"),
        ("camels crossing sand dunes", "Voyages", "The Desert Crossing"),
        ("extracting honey from the frames", "Field Notes on Bees", "Honey Harvest"),
        ("melting sugar until it turns brown", "Kitchen Chemistry", "Caramel"),
        ("pendulum clock repair by candlelight", "On Clocks", "Chapter 1"),
    ]
    for query, title, chapter in cases:
        hits = search_chunks(table, query, embedder.encode([query])[0], k=3)
        assert (hits[0].title, hits[0].chapter) == (title, chapter), (
            query,
            [(h.title, h.chapter) for h in hits],
        )
        assert hits[0].score >= hits[-1].score
        assert hits[0].parts["cosine"] > 0
    hits = search_chunks(table, "penguins", embedder.encode(["penguins"])[0], k=1)
    assert hits[0].chapter == "The Frozen Sea" and hits[0].parts["text_rank"] == 0


def test_library_search_and_reindex_entry_points(settings, embedder):
    from mindflow import rag
    from mindflow.errors import MindflowError

    assert rag.search("anything", settings=settings, embedder=embedder) == []  # no index yet
    with pytest.raises(MindflowError, match="no ebook folder"):
        rag.reindex(settings, embedder=embedder)
    write_library(settings.ebooks)
    report = rag.reindex(settings, embedder=embedder)
    assert report.documents == 5 and report.chunk_tokens == 254  # capped at the model's window
    hits = rag.search("wooden bird calling the hours", 2, settings=settings, embedder=embedder)
    assert hits[0].title == "On Clocks" and hits[0].chapter == "Chapter 2"
    with pytest.raises(MindflowError, match="empty"):
        rag.search("  ", settings=settings, embedder=embedder)


# --- the shared data set (skipped where it is absent) --------------------------------------------


@pytest.mark.skipif(
    not EBOOKS.is_dir(), reason=f"{EBOOKS} is absent (shared data sets sit beside the project)"
)
@pytest.mark.parametrize(
    "name", ["adventures-of-sherlock-holmes.epub", "pride-and-prejudice.txt", "pride-and-prejudice.html"]
)
def test_shared_ebooks_parse_with_chapters_and_without_boilerplate(name):
    doc = parse_document(EBOOKS / name)
    assert doc.author in ("Jane Austen", "Arthur Conan Doyle")
    if doc.author == "Jane Austen":
        assert doc.title == "Pride and Prejudice"
        assert [c.title for c in doc.chapters if c.title.startswith("Chapter")] == [
            f"Chapter {i}" for i in range(1, 62)
        ]
        assert "Project Gutenberg" not in doc.text
        assert "It is a truth universally acknowledged" in doc.text[:200]
    else:
        assert doc.title == "The Adventures of Sherlock Holmes" and len(doc.chapters) == 12
        assert doc.chapters[0].title == "A Scandal in Bohemia"
        assert "Standard Ebooks" not in doc.text  # imprint and colophon are not chapters


@pytest.mark.skipif(
    not EBOOKS.is_dir(), reason=f"{EBOOKS} is absent (shared data sets sit beside the project)"
)
def test_shared_ebook_chunks_stay_in_their_story(embedder):
    doc = parse_document(EBOOKS / "adventures-of-sherlock-holmes.epub")
    spans, window = tokenizer_spans(embedder.model)
    chunks = chunk_document("holmes.epub", doc, spans, window, 50)
    assert 500 < len(chunks) < 1000
    stories = [c.chapter for c in chunks]
    # Chapters appear as contiguous runs, in reading order.
    assert list(dict.fromkeys(stories)) == [c.title for c in doc.chapters]
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in chunks)


def test_copying_the_library_keeps_doc_ids_relative(settings, embedder, tmp_path):
    folder = write_library(tmp_path / "elsewhere")
    nested = settings.ebooks / "shelf"
    shutil.copytree(folder, nested)
    (settings.ebooks / ".hidden.txt").parent.mkdir(parents=True, exist_ok=True)
    (settings.ebooks / ".hidden.txt").write_text("Chapter 1\n\nNot indexed: hidden files are skipped.")
    report = _reindex(settings, embedder)
    assert "shelf/keeper.txt" in report.chunks_by_document and ".hidden.txt" not in report.chunks_by_document


def test_the_same_passage_from_two_files_of_a_book_is_shown_once(settings, embedder):
    from mindflow.rag.hybrid import SearchConfig

    settings.ebooks.mkdir(parents=True)
    (settings.ebooks / "keeper.txt").write_text(
        gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER)
    )
    body = "".join(f"<h2>{h}</h2><p>{t}</p>" for h, t in KEEPER.items())
    (settings.ebooks / "keeper.html").write_text(
        f"<html><head><title>The Lighthouse Keeper</title></head><body>{body}</body></html>"
    )
    _reindex(settings, embedder)
    table = lance.connect(settings.lance_path).open_table(TABLE)
    query = "sailors rescued from a shipwreck"
    vector = embedder.encode([query])[0]
    hits = search_chunks(table, query, vector, k=3)
    assert hits[0].chapter == "Chapter 2"
    words = [set(h.text.lower().split()) for h in hits]
    for i in range(len(hits)):
        for j in range(i + 1, len(hits)):
            assert len(words[i] & words[j]) / len(words[i] | words[j]) < 0.6  # not once per file
    both = search_chunks(table, query, vector, k=3, config=SearchConfig(duplicate=1.01))
    assert {h.doc_id for h in both[:2]} == {"keeper.txt", "keeper.html"}
    assert {h.chapter for h in both[:2]} == {"Chapter 2"}


# --- the vector index, built once the table is large enough ------------------------------------


def _almanac(sentences: int) -> str:
    """A plain-text book of many distinct short sentences (enough chunks for a vector index)."""
    animals = ["otter", "heron", "badger", "falcon", "beaver", "lynx", "marten", "stoat", "crane", "wren"]
    deeds = ["crossed", "guarded", "circled", "dug under", "slept beside", "watched", "followed"]
    places = ["the mill pond", "the birch wood", "the quarry", "the orchard", "the weir", "the old barn"]
    lines = [
        f"On day {i} the {animals[i % 10]} {deeds[i % 7]} {places[i % 6]} at hour {i % 24}."
        for i in range(sentences)
    ]
    half = sentences // 2
    return "Chapter 1\n\n" + " ".join(lines[:half]) + "\n\nChapter 2\n\n" + " ".join(lines[half:]) + "\n"


def test_vector_index_is_built_from_the_configured_size_and_search_still_finds(
    settings, embedder, monkeypatch
):
    from mindflow import rag
    from mindflow.config import load_settings
    from mindflow.rag.index import _has_vector_index

    monkeypatch.setenv("MINDFLOW_EBOOKS_VECTOR_INDEX_MIN_ROWS", "256")
    monkeypatch.setenv("MINDFLOW_EBOOKS_CHUNK_TOKENS", "16")
    monkeypatch.setenv("MINDFLOW_EBOOKS_CHUNK_OVERLAP", "2")
    small = load_settings()
    assert small.ebooks_vector_index_min_rows == 256
    small.ebooks.mkdir(parents=True)
    (small.ebooks / "keeper.txt").write_text(gutenberg_text("The Lighthouse Keeper", "Ada Lovelace", KEEPER))
    first = rag.reindex(small, embedder=embedder)
    assert first.chunks < 256 and not first.vector_index  # below the threshold: brute force only
    table = lance.connect(small.lance_path).open_table(TABLE)
    assert not _has_vector_index(table)

    (small.ebooks / "almanac.txt").write_text(_almanac(360))
    second = rag.reindex(small, embedder=embedder)
    assert second.chunks >= 256 and second.vector_index, second
    table = lance.connect(small.lance_path).open_table(TABLE)
    (vector_index,) = [i for i in table.list_indices() if "vector" in i.columns]
    assert "IVF" in str(vector_index.index_type).upper()
    assert any("text" in i.columns for i in table.list_indices())  # the full-text index stays
    # The vector search now goes through the index (an ANN plan, not a flat scan).
    plan = table.search(embedder.encode(["x"])[0], vector_column_name="vector").limit(3).explain_plan(True)
    assert "ANN" in plan.upper(), plan

    hits = rag.search(
        "rescuing shipwrecked sailors from a storm on the reef", 3, settings=small, embedder=embedder
    )
    assert (hits[0].title, hits[0].chapter) == ("The Lighthouse Keeper", "Chapter 2")
    # The index's candidates are re-scored on the stored vectors: `cosine` is the true cosine.
    query = embedder.encode(["rescuing shipwrecked sailors from a storm on the reef"])[0]
    exact = float(np.dot(embedder.encode([hits[0].text])[0], query))
    assert hits[0].parts["vector_rank"] >= 0 and abs(hits[0].parts["cosine"] - exact) < 0.02
    hits = rag.search("the lynx slept beside the orchard", 3, settings=small, embedder=embedder)
    assert hits[0].doc_id == "almanac.txt"

    # A later change keeps the index (the new rows go into it on optimize).
    (small.ebooks / "keeper.txt").unlink()
    third = rag.reindex(small, embedder=embedder)
    assert third.removed == ["keeper.txt"] and third.vector_index
