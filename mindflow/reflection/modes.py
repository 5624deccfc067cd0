"""Approval modes: which changes apply directly (auto) and which wait for a person (review)."""

from __future__ import annotations

from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.inbox import validate_being_id

MODES = ("auto", "review")


def being_modes(settings: Settings) -> dict[str, str]:
    """MINDFLOW_APPROVAL_MODES ('ada=review,bram=auto') as being -> mode; a typo is an error, not auto."""
    found: dict[str, str] = {}
    for entry in (e.strip() for e in settings.approval_modes.replace(";", ",").split(",")):
        if not entry:
            continue
        being, sep, mode = (p.strip() for p in entry.partition("="))
        if not sep or mode not in MODES:
            raise MindflowError(
                f"MINDFLOW_APPROVAL_MODES entry {entry!r}: write being=mode with mode auto or review, "
                "e.g. 'ada=review,bram=auto'"
            )
        found[validate_being_id(being)] = mode
    return found


def approval_mode(settings: Settings, being_id: str) -> str:
    """The being's mode: its MINDFLOW_APPROVAL_MODES entry, else MINDFLOW_APPROVAL_MODE."""
    return being_modes(settings).get(being_id, settings.approval_mode)


def in_review(settings: Settings, being_id: str) -> bool:
    return approval_mode(settings, being_id) == "review"
