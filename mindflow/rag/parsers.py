"""Documents to text: EPUB, PDF, HTML, plain text and Markdown, with title, author and chapters."""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

FORMATS = {
    ".epub": "epub",
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
}
# Bumped when parsing changes what text or chapters a document yields: every document is re-chunked.
PARSER_VERSION = 2  # 2: Gutenberg text markers inside EPUB XHTML, EPUB chapters split at TOC anchors
CHAPTER_SEPARATOR = "\n\n"


class DocumentError(Exception):
    """A document that cannot be indexed (corrupt, encrypted, empty); the message is the reason."""


@dataclass
class Chapter:
    title: str
    text: str
    start: int = 0  # character offset of `text` in Document.text


@dataclass
class Document:
    """A parsed document: its chapters in reading order, and their text joined as `text`."""

    title: str
    author: str | None
    format: str
    chapters: list[Chapter] = field(default_factory=list)
    text: str = ""


def document_format(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


def parse_document(path: Path, data: bytes | None = None) -> Document:
    """Parse one file by its extension; raises DocumentError with the reason it cannot be indexed."""
    fmt = document_format(path)
    if fmt is None:
        raise DocumentError(f"unsupported file type {path.suffix!r}")
    if data is None:
        data = path.read_bytes()
    if not data.strip():
        raise DocumentError("empty file")
    parser = {"epub": _epub, "pdf": _pdf, "html": _html, "text": _text, "markdown": _markdown}[fmt]
    try:
        title, author, sections = parser(data)
    except DocumentError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parser failure means this one document is unreadable
        raise DocumentError(f"cannot parse {fmt}: {exc.__class__.__name__}: {exc}") from exc
    doc = assemble(title or _title_from_name(path), author, fmt, sections)
    if not doc.chapters:
        hint = " (no text layer: a scanned PDF needs OCR first)" if fmt == "pdf" else ""
        raise DocumentError(f"no text found{hint}")
    return doc


def assemble(title: str, author: str | None, fmt: str, sections: list[tuple[str, str]]) -> Document:
    """Chapters with text (empty headings dropped), joined with their offsets."""
    chapters: list[Chapter] = []
    parts: list[str] = []
    offset = 0
    headings = {_one_line(h).lower() for h, _ in sections if h.strip()}
    for heading, body in sections:
        body = _tidy(body)
        if not body or _is_contents(body, headings):
            continue
        if parts:
            parts.append(CHAPTER_SEPARATOR)
            offset += len(CHAPTER_SEPARATOR)
        chapters.append(Chapter(_one_line(heading), body, offset))
        parts.append(body)
        offset += len(body)
    return Document(_one_line(title), _one_line(author) if author else None, fmt, chapters, "".join(parts))


def _is_contents(body: str, headings: set[str]) -> bool:
    """A table of contents: mostly lines naming other chapters (its text would only add noise)."""
    lines = [_one_line(line).lower() for line in body.splitlines() if line.strip()]
    if len(lines) < 3:
        return False
    named = sum(1 for line in lines if line in headings or _HEADING.fullmatch(line) or line == "contents")
    return named >= 0.8 * len(lines)


def _title_from_name(path: Path) -> str:
    return re.sub(r"[-_]+", " ", path.stem).strip().title() or path.name


def _one_line(value: str) -> str:
    return re.sub(r"\s+", " ", value or "").strip()


def _tidy(text: str) -> str:
    """Trailing spaces off, at most one blank line in a row, no blank edges."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00ad", "")
    text = re.sub(r"[ \t\u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


# --- Project Gutenberg boilerplate -------------------------------------------------------------

_PG_START = re.compile(
    r"^\s*\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*$", re.IGNORECASE | re.MULTILINE
)
_PG_END = re.compile(
    r"^\s*(?:\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*"
    r"|End of (?:the )?Project Gutenberg'?s? .*)$",
    re.IGNORECASE | re.MULTILINE,
)
_PG_FIELD = re.compile(r"^\s*(Title|Author):\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_PRODUCED_BY = re.compile(
    r"^\s*(?:Produced|Transcribed|E-text prepared) by[^\n]*(?:\n[^\n]*\S[^\n]*)*", re.IGNORECASE
)


def strip_gutenberg(text: str) -> tuple[str, dict[str, str]]:
    """The body between the Project Gutenberg START and END lines, and the header's Title/Author.

    Text without the markers is returned unchanged.
    """
    text = re.sub(r"[ \t\u00a0]+\n", "\n", text)
    start = _PG_START.search(text)
    if start is None:
        return text, {}
    header = text[: start.start()]
    fields = {m.group(1).lower(): m.group(2) for m in _PG_FIELD.finditer(header)}
    body = text[start.end() :]
    end = _PG_END.search(body)
    if end is not None:
        body = body[: end.start()]
    body = _PRODUCED_BY.sub("", body.lstrip("\n"), count=1)
    return body, fields


# --- plain text and PDF text: chapter headings by line ----------------------------------------

_NUMBER = (
    r"(?:\d+|[IVXLCDM]+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty)"
    r"(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?"
)
_HEADING = re.compile(
    r"^[ \t]*((?:chapter|book|part|volume|letter|stave|section)[ \t]+"
    rf"{_NUMBER}\b\.?(?:[ \t]*[:.\-—–][^\n]*)?)[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


def split_by_headings(text: str) -> list[tuple[str, str]]:
    """(heading, body) at lines like `Chapter 12`, `CHAPTER XII. The Ball`, `Part Two`."""
    sections: list[tuple[str, str]] = []
    last_end, heading = 0, ""
    for m in _HEADING.finditer(text):
        if len(m.group(1)) > 80:
            continue
        sections.append((heading, text[last_end : m.start()]))
        heading, last_end = m.group(1).strip(), m.end()
    sections.append((heading, text[last_end:]))
    return sections


def _decode(data: bytes) -> str:
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _text(data: bytes) -> tuple[str, str | None, list[tuple[str, str]]]:
    raw = _decode(data).replace("\r\n", "\n").replace("\r", "\n")
    body, fields = strip_gutenberg(raw)
    title = fields.get("title") or _first_line(body)
    return title, fields.get("author"), split_by_headings(body)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


# --- Markdown ------------------------------------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)
_ATX = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def _markdown(data: bytes) -> tuple[str, str | None, list[tuple[str, str]]]:
    text = _decode(data).replace("\r\n", "\n")
    title = author = None
    front = _FRONT_MATTER.match(text)
    if front:
        for line in front.group(1).splitlines():
            key, _, value = line.partition(":")
            value = value.strip().strip("'\"")
            if key.strip().lower() == "title" and value:
                title = value
            elif key.strip().lower() == "author" and value:
                author = value
        text = text[front.end() :]
    text, fields = strip_gutenberg(text)
    title = title or fields.get("title")
    author = author or fields.get("author")
    headings = list(_ATX.finditer(text))
    levels = [len(m.group(1)) for m in headings]
    # A single top heading is the book's title; the chapters are the next level down.
    if levels.count(1) == 1 and any(level == 2 for level in levels):
        top = next(m for m in headings if len(m.group(1)) == 1)
        title = title or top.group(2)
        split_level = 2
    else:
        split_level = min(levels) if levels else 1
    sections: list[tuple[str, str]] = []
    heading, last_end = "", 0
    for m in headings:
        if len(m.group(1)) > split_level:
            continue
        sections.append((heading, text[last_end : m.start()]))
        heading, last_end = (m.group(2) if len(m.group(1)) == split_level else ""), m.end()
    sections.append((heading, text[last_end:]))
    return title or _first_line(text).lstrip("# "), author, sections


# --- HTML and XHTML -----------------------------------------------------------------------------

_BLOCK = {
    "p", "div", "section", "article", "blockquote", "pre", "li", "ul", "ol", "dl", "dt", "dd", "tr",
    "table", "header", "footer", "aside", "figure", "figcaption", "hr", "br", "main", "nav", "address",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_SKIP = {"script", "style", "head", "title", "noscript", "svg", "math", "template"}
_PG_BOILERPLATE = re.compile(r"pg-boilerplate|pg-header|pg-footer|pgheader|pgfooter", re.IGNORECASE)


def _local(tag) -> str:
    if not isinstance(tag, str):
        return ""  # comments and processing instructions
    return tag.rsplit("}", 1)[-1].lower()


ANCHOR = -1  # the level of an `(ANCHOR, id)` entry of html_blocks: where a marked element starts


def html_blocks(root, anchors: set[str] | None = None) -> list[tuple[int, str]]:
    """(heading level or 0, text) per block of an lxml tree, in document order.

    With `anchors`, an element whose id (or `<a name>`) is one of them ends the text before it
    and adds `(ANCHOR, id)` where it starts: an EPUB file holding several chapters is split there.
    """
    blocks: list[tuple[int, str]] = []
    current: list[str] = []

    def flush(level: int = 0) -> None:
        text = "".join(current)
        current.clear()
        text = re.sub(r"[ \t\r\n\u00a0]+", " ", text).strip() if level or not pre else text.strip("\n")
        if text:
            blocks.append((level, text))

    pre = False

    def walk(el) -> None:
        nonlocal pre
        tag = _local(el.tag)
        if tag in _SKIP or _PG_BOILERPLATE.search(f"{el.get('id', '')} {el.get('class', '')}"):
            if el.tail:
                current.append(el.tail)
            return
        if anchors:
            mark = el.get("id") if el.get("id") in anchors else el.get("name") if tag == "a" else None
            if mark in anchors:
                flush()
                blocks.append((ANCHOR, mark))
        level = _HEADINGS.get(tag, 0)
        block = level or tag in _BLOCK
        if block:
            flush()
        was_pre = pre
        pre = pre or tag == "pre"
        if el.text and tag:
            current.append(el.text)
        for child in el:
            walk(child)
        if block:
            flush(level)
        pre = was_pre
        if el.tail:
            current.append(el.tail)

    walk(root)
    flush()
    return blocks


def _parse_html(data: bytes):
    import lxml.html

    return lxml.html.document_fromstring(data)


def _meta(root, *names: str) -> str | None:
    for el in root.iter():
        if _local(el.tag) == "meta" and (el.get("name") or "").lower() in names and el.get("content"):
            return el.get("content").strip()
    return None


def _html(data: bytes) -> tuple[str, str | None, list[tuple[str, str]]]:
    root = _parse_html(data)
    blocks = html_blocks(root)
    # Gutenberg HTML keeps its header and license in ordinary blocks around the markers.
    starts = [i for i, (_, t) in enumerate(blocks) if _PG_START.search(t)]
    fields: dict[str, str] = {}
    if starts:
        header = "\n".join(t for _, t in blocks[: starts[0] + 1])
        fields = {m.group(1).lower(): m.group(2) for m in _PG_FIELD.finditer(header.split("*** START")[0])}
        blocks = blocks[starts[0] + 1 :]
        ends = [i for i, (_, t) in enumerate(blocks) if _PG_END.search(t)]
        if ends:
            blocks = blocks[: ends[0]]
    title_el = next((el for el in root.iter() if _local(el.tag) == "title"), None)
    title = (
        fields.get("title")
        or _meta(root, "dc.title", "dcterms.title")
        or (title_el.text_content().strip() if title_el is not None else "")
    )
    author = fields.get("author") or _meta(root, "author", "dc.creator", "dcterms.creator")
    return title, author, _sections_from_blocks(blocks)


def _sections_from_blocks(blocks: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """Chapters start at the headings of the level most headings have (h2 in most books)."""
    levels = [level for level, _ in blocks if level]
    split = min(levels, key=lambda lv: (-levels.count(lv), lv)) if levels else 0
    sections: list[tuple[str, list[str]]] = [("", [])]
    for level, text in blocks:
        if level and level <= split:
            sections.append((text if level == split else "", []))
        else:
            sections[-1][1].append(text)
    return [(heading, "\n\n".join(body)) for heading, body in sections]


# --- EPUB (zip + OPF + XHTML) ---------------------------------------------------------------------

_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_EPUB_NS = "{http://www.idpf.org/2007/ops}"
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")
# Spine items that hold no book text.
_NOT_TEXT = {
    "titlepage", "halftitlepage", "imprint", "colophon", "copyright-page", "toc", "cover", "landmarks"
}  # fmt: skip


def _xml(data: bytes):
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, recover=True)
    return etree.fromstring(data, parser=parser)


def _epub(data: bytes) -> tuple[str, str | None, list[tuple[str, str]]]:
    try:
        book = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise DocumentError(f"corrupt EPUB: not a readable zip archive ({exc})") from exc
    with book:
        names = set(book.namelist())
        bad = book.testzip()
        if bad is not None:
            raise DocumentError(f"corrupt EPUB: {bad} fails its checksum")
        if "META-INF/encryption.xml" in names:
            enc = _xml(book.read("META-INF/encryption.xml"))
            methods = [(m.get("Algorithm") or "") for m in enc.iter() if _local(m.tag) == "encryptionmethod"]
            if any(m not in _FONT_OBFUSCATION for m in methods):
                raise DocumentError("encrypted EPUB (DRM): remove the protection to index it")
        if "META-INF/container.xml" not in names:
            raise DocumentError("corrupt EPUB: META-INF/container.xml is missing")
        container = _xml(book.read("META-INF/container.xml"))
        rootfile = next((el.get("full-path") for el in container.iter(f"{_CONTAINER}rootfile")), None)
        if not rootfile or rootfile not in names:
            raise DocumentError("corrupt EPUB: the package document (OPF) is missing")
        opf = _xml(book.read(rootfile))
        base = posixpath.dirname(rootfile)
        title = next((el.text for el in opf.iter(f"{_DC}title") if el.text), None)
        author = ", ".join(el.text.strip() for el in opf.iter(f"{_DC}creator") if el.text) or None
        manifest = {
            el.get("id"): (posixpath.normpath(posixpath.join(base, unquote(el.get("href", "")))), el)
            for el in opf.iter(f"{_OPF}item")
        }
        labels = _epub_labels(book, names, manifest)
        # (TOC label or None, blocks, the file's <title>) per chapter, in reading order.
        parts: list[tuple[str | None, list[tuple[int, str]], str]] = []
        for ref in opf.iter(f"{_OPF}itemref"):
            path, item = manifest.get(ref.get("idref"), (None, None))
            if path is None or path not in names or "nav" in (item.get("properties") or "").split():
                continue
            root = _parse_html(book.read(path))
            body_types = " ".join(
                (el.get(f"{_EPUB_NS}type") or el.get("epub:type") or "")
                for el in root.iter()
                if _local(el.tag) in ("body", "section", "article")
            ).split()
            if _NOT_TEXT.intersection(body_types):
                continue
            title_el = next((el for el in root.iter() if _local(el.tag) == "title"), None)
            page_title = title_el.text_content().strip() if title_el is not None else ""
            entries = labels.get(path, [])
            fragments = {fragment: label for fragment, label in entries if fragment}
            if len(entries) < 2 or not fragments:
                parts.append((entries[0][1] if entries else None, html_blocks(root), page_title))
                continue
            # One file, several chapters of the table of contents: split it at their anchors.
            label = next((label for fragment, label in entries if not fragment), None)
            current: list[tuple[int, str]] = []
            for level, text in html_blocks(root, set(fragments)):
                if level == ANCHOR:
                    parts.append((label, current, ""))
                    label, current = fragments[text], []
                else:
                    current.append((level, text))
            parts.append((label, current, ""))
        parts, fields = _strip_gutenberg_parts(parts)
        title = title or fields.get("title")
        author = author or fields.get("author")
        sections: list[tuple[str, str]] = []
        for label, blocks, page_title in parts:
            heading = label
            if heading is None:
                heading = next((t for level, t in blocks if level), "") or page_title
            text = "\n\n".join(t for level, t in blocks if t != heading)
            sections.append((heading, text))
    return title or "", author, sections


def _strip_gutenberg_parts(parts: list) -> tuple[list, dict[str, str]]:
    """Older Project Gutenberg EPUBs keep the plain-text `*** START OF ... ***` and
    `*** END OF ... ***` lines in their XHTML: only the chapters' text between them is kept,
    and the header's Title/Author are returned. Parts without the markers are unchanged."""
    start = next(
        (
            (i, j)
            for i, (_, blocks, _) in enumerate(parts)
            for j, (_, t) in enumerate(blocks)
            if _PG_START.search(t)
        ),
        None,
    )
    if start is None:
        return parts, {}
    i, j = start
    header = "\n".join(t for _, blocks, _ in parts[:i] for _, t in blocks)
    header += "\n" + "\n".join(t for _, t in parts[i][1][:j])
    fields = {m.group(1).lower(): m.group(2) for m in _PG_FIELD.finditer(header)}
    label, blocks, page_title = parts[i]
    rest = blocks[j + 1 :]
    if rest and _PRODUCED_BY.match(rest[0][1]):
        rest = rest[1:]
    kept = [(label, rest, page_title), *parts[i + 1 :]]
    for i, (label, blocks, page_title) in enumerate(kept):
        end = next((j for j, (_, t) in enumerate(blocks) if _PG_END.search(t)), None)
        if end is not None:
            kept = [*kept[:i], (label, blocks[:end], page_title)]
            break
    return kept, fields


def _toc_depth(el, kinds: set[str]) -> int:
    return sum(1 for parent in el.iterancestors() if _local(parent.tag) in kinds)


def _epub_labels(book: zipfile.ZipFile, names: set[str], manifest: dict) -> dict[str, list[tuple[str, str]]]:
    """Spine file -> its table-of-contents entries as (anchor id or "", label), in TOC order
    (EPUB 3 nav, else EPUB 2 NCX).

    Only the file's shallowest entries count: a story with its parts I, II, III nested under
    it stays one chapter, a file holding several chapters of the same level has them all.
    """
    found: dict[str, list[tuple[int, str, str]]] = {}

    def add(target_of: str, href: str, label: str, depth: int) -> None:
        file, _, fragment = unquote(href).partition("#")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(target_of), file))
        entries = found.setdefault(target, [])
        if all(f != fragment for _, f, _ in entries):
            entries.append((depth, fragment, _one_line(label)))

    for path, item in manifest.values():
        props = (item.get("properties") or "").split()
        if "nav" in props and path in names:
            root = _parse_html(book.read(path))
            for nav in root.iter():
                if _local(nav.tag) != "nav":
                    continue
                kind = nav.get(f"{_EPUB_NS}type") or nav.get("epub:type") or ""
                if "toc" not in kind.split():
                    continue
                for a in nav.iter():
                    if _local(a.tag) == "a" and a.get("href"):
                        add(path, a.get("href"), a.text_content(), _toc_depth(a, {"ol", "ul"}))
    if not found:
        for path, item in manifest.values():
            if item.get("media-type") == "application/x-dtbncx+xml" and path in names:
                ncx = _xml(book.read(path))
                for point in ncx.iter(f"{_NCX}navPoint"):
                    text = next((t.text for t in point.iter(f"{_NCX}text") if t.text), "")
                    content = next(point.iter(f"{_NCX}content"), None)
                    if content is not None and content.get("src"):
                        add(path, content.get("src"), text or "", _toc_depth(point, {"navPoint"}))
    labels: dict[str, list[tuple[str, str]]] = {}
    for target, entries in found.items():
        top = min(depth for depth, _, _ in entries)
        labels[target] = [(fragment, label) for depth, fragment, label in entries if depth == top]
    return labels


# --- PDF ----------------------------------------------------------------------------------------


def _pdf(data: bytes) -> tuple[str, str | None, list[tuple[str, str]]]:
    import logging

    import pypdf
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
    except PdfReadError as exc:
        raise DocumentError(f"corrupt PDF: {exc}") from exc
    if reader.is_encrypted:
        try:
            # Many PDFs are encrypted with an empty user password (restrictions only).
            opened = reader.decrypt("")
        except Exception as exc:  # noqa: BLE001 - missing crypto backends raise their own types
            raise DocumentError(f"encrypted PDF: cannot decrypt ({exc.__class__.__name__}: {exc})") from exc
        if not opened:
            raise DocumentError("encrypted PDF: it needs a password; remove the protection to index it")
    pages = [(page.extract_text() or "") for page in reader.pages]
    if not any(p.strip() for p in pages):
        raise DocumentError(f"no text layer in {len(pages)} pages (a scanned PDF needs OCR first)")
    meta = reader.metadata or {}
    text = "\n".join(pages)
    body, fields = strip_gutenberg(text)
    title = fields.get("title") or (meta.get("/Title") if meta else None)
    author = fields.get("author") or (meta.get("/Author") if meta else None)
    sections = _pdf_outline_sections(reader, pages) if not fields else None
    return str(title or ""), str(author) if author else None, sections or split_by_headings(body)


def _pdf_outline_sections(reader, pages: list[str]) -> list[tuple[str, str]] | None:
    """Chapters from the PDF's bookmarks (top level), when it has any."""
    try:
        outline = reader.outline
        marks = []
        for item in outline:
            if isinstance(item, list):
                continue
            page = reader.get_destination_page_number(item)
            if page is not None and page >= 0:
                marks.append((page, str(item.title)))
    except Exception:  # noqa: BLE001 - a broken outline just means no bookmarks
        return None
    marks.sort()
    if len(marks) < 2:
        return None
    sections = [("", "\n".join(pages[: marks[0][0]]))]
    for i, (page, title) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(pages)
        sections.append((title, "\n".join(pages[page:end])))
    return sections
