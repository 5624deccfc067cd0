"""LoCoMo-format conversation files (`conv-*.json`, as bench/locomo.py reads them) for the tests of
the recall benchmark."""

from __future__ import annotations

import json
from pathlib import Path


def write_conversation(
    folder: Path, stem: str, sessions: list[tuple[str, list[dict]]], qa: list[dict]
) -> Path:
    """`folder/<stem>.json`: a conversation between Ines and Omar of `sessions`, each (its date
    and time as LoCoMo writes them, its turns: speaker, dia_id, text and an optional
    blip_caption), with the questions `qa` (question, evidence, category)."""
    conversation: dict = {"speaker_a": "Ines", "speaker_b": "Omar"}
    for n, (when, turns) in enumerate(sessions, start=1):
        conversation[f"session_{n}_date_time"] = when
        conversation[f"session_{n}"] = turns
    path = folder / f"{stem}.json"
    path.write_text(json.dumps({"conversation": conversation, "qa": qa}))
    return path
