"""LoCoMo conversations as inbox JSONL: one being per conversation, one episode per turn."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

DATASET = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "locomo-dev"


@dataclass(frozen=True)
class Source:
    """One LoCoMo conversation: a `conv-*.json` file of a folder, or an entry of a JSON list of
    them, as the data set's release ships them (`data/locomo10.json`)."""

    name: str  # the file's stem, or the entry's sample_id
    path: Path
    index: int | None = None  # the entry's place in the list
    # The entry, parsed once with its list (a file is read when asked: a broken one is named then).
    entry: object = field(default=None, compare=False, repr=False)

    def data(self) -> dict:
        return json.loads(self.path.read_text()) if self.index is None else self.entry

    def __str__(self) -> str:
        return str(self.path) if self.index is None else f"{self.path} [{self.name}]"


def conversations(location: Path = DATASET, leave_out: Collection[str] = ()) -> list[Source]:
    """The conversations of a folder's `conv-*.json` files, or of one JSON file holding one
    conversation or a list of them, but those named in `leave_out`; a file that is not JSON
    raises ValueError."""
    if location.is_dir():
        found = [Source(path.stem, path) for path in sorted(location.glob("conv-*.json"))]
    else:
        data = json.loads(location.read_text())
        if isinstance(data, list):
            found = [Source(_name(e, f"{location.stem}-{i + 1}"), location, i, e) for i, e in enumerate(data)]
        else:
            found = [Source(location.stem, location)]
    left_out = {name.lower() for name in leave_out}
    return [source for source in found if source.name.lower() not in left_out]


def _name(entry, otherwise: str) -> str:
    """A list entry's sample_id, or `otherwise`."""
    named = isinstance(entry, dict) and entry.get("sample_id")
    return str(named) if named else otherwise


def being_id(source: Source) -> str:
    return "locomo-" + source.name.lower()


def _session_time(value: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(re.sub(r"\s+", " ", value.strip()), "%I:%M %p on %d %B, %Y")


def turns(source: Source) -> list[dict]:
    """Inbox episodes for one conversation: ts from the session date, id = the turn's dia_id."""
    data = source.data()
    data = data.get("conversation", data)
    out = []
    n = 1
    while f"session_{n}_date_time" in data:
        start = _session_time(data[f"session_{n}_date_time"])
        for i, turn in enumerate(data.get(f"session_{n}") or []):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares {turn['blip_caption']}]"
            out.append(
                {
                    "id": turn["dia_id"],
                    "ts": (start + timedelta(seconds=30 * i)).isoformat() + "Z",
                    "speaker": turn["speaker"],
                    "role": "user",
                    "text": f"{turn['speaker']}: {text}",
                    "session_id": f"session_{n}",
                }
            )
        n += 1
    return out


def write_inbox(inbox: Path, location: Path = DATASET, leave_out: Collection[str] = ()) -> dict[str, int]:
    """Write every conversation into `inbox/<being>/<name>.jsonl`; returns turns per being."""
    counts = {}
    for source in conversations(location, leave_out):
        being = being_id(source)
        rows = turns(source)
        target = inbox / being / f"{source.name}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[being] = len(rows)
    return counts
