"""The Being design's scene as text, and its emotion's storage type.

`scene_to_text` is how a scene is shown to a reader or a model (the design's `sceneToText`):
`YYYY-MM-DD — setting — action — "first dialogue line" — (feeling)`, parts it lacks left out.
It is not what a memory is embedded from (`patrol.node_text`), so showing never moves vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from mindflow.prompts.extraction import EMOTION_KEYS

SEPARATOR = " — "
EMOTION_ARROW = pa.struct([(key, pa.float64()) for key in EMOTION_KEYS])
STRINGS = pa.list_(pa.string())


def _first_date(when: Sequence | None) -> str | None:
    for w in when or []:
        day = w.get("date") if isinstance(w, dict) else w
        if day:
            return str(day)
    return None


def scene_to_text(
    when: Sequence | None,
    setting: str | None,
    action: str | None,
    dialogue: Sequence[str] | str | None,
    feeling: str | None,
) -> str:
    """`2024-03-02 — the station — Met Hashi — "Long time!" — (glad)`."""
    lines = [dialogue] if isinstance(dialogue, str) else list(dialogue or [])
    quote = next((" ".join(d.split()) for d in lines if d and d.strip()), None)
    parts = [
        _first_date(when),
        " ".join(setting.split()) if setting else None,
        " ".join(action.split()) if action else None,
        f'"{quote}"' if quote else None,
        f"({' '.join(feeling.split())})" if feeling else None,
    ]
    return SEPARATOR.join(p for p in parts if p)


def emotion_dict(emotion) -> dict | None:
    """A validated `Emotion` (or None) as the row DuckDB stores."""
    return None if emotion is None else {key: float(getattr(emotion, key)) for key in EMOTION_KEYS}
