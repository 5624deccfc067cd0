"""The record of critical files' checksums (meta/integrity.json)."""

from __future__ import annotations

import json

from mindflow.audit.trail import INTEGRITY
from mindflow.config import Settings
from mindflow.files import atomic_write


def _load_integrity(settings: Settings) -> dict:
    path = settings.workspace / INTEGRITY
    if path.is_file():
        try:
            state = json.loads(path.read_text())
            if isinstance(state, dict):
                return {"files": dict(state.get("files", {})), "alerted": dict(state.get("alerted", {}))}
        except json.JSONDecodeError:
            pass
    return {"files": {}, "alerted": {}}


def _save_integrity(settings: Settings, state: dict) -> None:
    atomic_write(
        settings.workspace / INTEGRITY, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode()
    )


def _record_checksums(settings: Settings, checksums: dict[str, str | None]) -> None:
    state = _load_integrity(settings)
    for key, sha in checksums.items():
        if sha is None:
            state["files"].pop(key, None)
        else:
            state["files"][key] = sha
        state["alerted"].pop(key, None)
    _save_integrity(settings, state)
