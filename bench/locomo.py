"""LoCoMo conversations as inbox JSONL: one being per conversation, one episode per turn."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

DATASET = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "locomo-dev"


def conversations(folder: Path = DATASET) -> list[Path]:
    return sorted(folder.glob("conv-*.json"))


def being_id(path: Path) -> str:
    return "locomo-" + path.stem.lower()


def _session_time(value: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(re.sub(r"\s+", " ", value.strip()), "%I:%M %p on %d %B, %Y")


def turns(path: Path) -> list[dict]:
    """Inbox episodes for one conversation: ts from the session date, id = the turn's dia_id."""
    data = json.loads(path.read_text())
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


def write_inbox(inbox: Path, folder: Path = DATASET) -> dict[str, int]:
    """Write every conversation into `inbox/<being>/<conv>.jsonl`; returns turns per being."""
    counts = {}
    for path in conversations(folder):
        being = being_id(path)
        rows = turns(path)
        target = inbox / being / f"{path.stem}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[being] = len(rows)
    return counts
