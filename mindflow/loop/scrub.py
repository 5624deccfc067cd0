"""Finding deleted texts in derived text (workspace files, their git history), and scrubbing them out.

A permanent forget knows the texts it deletes (episodes, memories, facts). Derived text
quotes them whole (an inbox line), cut short (a STORY.md line ends at 277 characters,
a MEMORY.md line at 240, a chapter title keeps 7 words) or reworded. Words, not
characters, are compared (lower case, punctuation dropped), so JSON escapes and
whitespace do not hide a quote: a line *holds* a text when it shares a run of five
consecutive words with it (all of a shorter text of three or four words). A reworded
text (a model's diary line) that shares no such run is not found.

Run as `python -m mindflow.loop.scrub` inside the workspace, with the texts as JSON on
stdin, it rewrites the repository's history with git-filter-repo: every blob loses the
lines that hold a text. The texts travel through a pipe, never through a file.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable

# Five words in a row are specific enough that an unrelated line rarely shares them.
RUN = 5
# Shorter texts ("ok", "see you") would match everywhere.
MIN_WORDS = 3
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Matcher:
    """Which lines hold any of the deleted texts."""

    def __init__(self, texts: Iterable[str]):
        self.runs: dict[int, set[tuple[str, ...]]] = {}
        self.whole: list[str] = []
        for text in texts:
            ws = words(text or "")
            if len(ws) < MIN_WORDS:
                continue
            n = min(RUN, len(ws))
            self.runs.setdefault(n, set()).update(tuple(ws[i : i + n]) for i in range(len(ws) - n + 1))
            self.whole.append(" " + " ".join(ws) + " ")

    def __bool__(self) -> bool:
        return bool(self.runs)

    def holds(self, line: str) -> bool:
        """The line shares a run of words with a deleted text (quoted, or cut short)."""
        if not self.runs:
            return False
        ws = words(line)
        for n, runs in self.runs.items():
            if any(tuple(ws[i : i + n]) in runs for i in range(len(ws) - n + 1)):
                return True
        return False

    def holds_whole(self, line: str) -> bool:
        """The line holds a whole deleted text: for raw inbox lines, where a shared run of words
        may be another episode's own words."""
        if not self.whole:
            return False
        joined = " " + " ".join(words(line)) + " "
        return any(w in joined for w in self.whole)

    def scrub(self, text: str) -> tuple[str, int]:
        """The text without the lines that hold a deleted text; and how many were removed."""
        kept, removed = [], 0
        for line in text.splitlines(keepends=True):
            if self.holds(line):
                removed += 1
            else:
                kept.append(line)
        return "".join(kept), removed


def plain(line: str) -> str:
    """The strings of a JSON line (nested JSON strings too, as quarantine lines keep the raw line),
    so escapes do not hide words; other lines as they are."""
    try:
        value = json.loads(line)
    except ValueError:
        return line
    out: list[str] = []

    def walk(v, depth: int = 0) -> None:
        if isinstance(v, str):
            out.append(v)
            if depth < 2 and v[:1] in "{[":
                try:
                    walk(json.loads(v), depth + 1)
                except ValueError:
                    pass
        elif isinstance(v, dict):
            for item in v.values():
                walk(item, depth)
        elif isinstance(v, list):
            for item in v:
                walk(item, depth)

    walk(value)
    return " ".join(out)


def _rewrite_history() -> None:
    """Child process: rewrite the repository in the current directory (see the module docstring).

    Prints one JSON line: blobs changed, commits whose content changed.
    """
    import git_filter_repo as fr

    matcher = Matcher(json.loads(sys.stdin.read()))
    changed = {"blobs": 0}

    def blob_callback(blob, _metadata) -> None:
        if b"\0" in blob.data[:8000]:
            return  # binary
        text = blob.data.decode("utf-8", "surrogateescape")
        scrubbed, removed = matcher.scrub(text)
        if removed:
            blob.data = scrubbed.encode("utf-8", "surrogateescape")
            changed["blobs"] += 1

    args = fr.FilteringOptions.parse_args(["--force", "--quiet"])
    fr.RepoFilter(args, blob_callback=blob_callback).run()
    commits = 0
    try:
        with open(".git/filter-repo/commit-map") as lines:
            next(lines, None)  # header
            commits = sum(
                1 for line in lines if len(line.split()) == 2 and line.split()[0] != line.split()[1]
            )
    except FileNotFoundError:
        pass
    print(json.dumps({"blobs": changed["blobs"], "commits": commits}))


if __name__ == "__main__":
    _rewrite_history()
