"""The README's tables of MINDFLOW_* variables against the settings they document.

An operator sets mindflow up from those tables: a variable missing from them cannot be found,
and a default that differs from the code's misleads (the table gave `fp32` as the embedding
precision's default for a while after new homes had moved to int8).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from readme import text

from mindflow.config import Settings
from mindflow.recall import RecallConfig

PREFIX = "MINDFLOW_"


def _documented() -> dict[str, list[str | None]]:
    """Each variable a README table row names in its first cell -> the default each such row's
    second cell gives it: the backticked value, by position where one row names several
    variables; None where the row gives none that can be read as one (a blank cell)."""
    rows: dict[str, list[str | None]] = {}
    for line in text().splitlines():
        if not line.startswith(f"| `{PREFIX}"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(rf"`({PREFIX}[A-Z0-9_]+)`", cells[0])
        values = re.findall(r"`([^`]*)`", cells[1]) if len(cells) > 1 else []
        for position, name in enumerate(names):
            if len(values) == len(names):
                shown = values[position]
            else:  # a lone variable's plain-text default ("unset", "5") is read as written
                shown = cells[1] if len(names) == 1 and len(cells) > 1 and cells[1] else None
            rows.setdefault(name, []).append(shown)
    return rows


def _variables() -> dict[str, str]:
    return {f"{PREFIX}{name}".upper(): name for name in Settings.model_fields}


def _same(value: object, shown: str) -> bool:
    if isinstance(value, bool):
        return shown.lower() in ({"true", "1", "on", "yes"} if value else {"false", "0", "off", "no"})
    if isinstance(value, Path):
        return Path(shown) == value
    if isinstance(value, int | float):
        try:
            return float(shown.replace(",", "").replace("_", "")) == float(value)
        except ValueError:
            return False
    return shown == str(value)


def test_every_setting_has_a_row_and_every_row_a_setting():
    documented, variables = _documented(), _variables()
    assert sorted(set(variables) - set(documented)) == []
    assert sorted(set(documented) - set(variables)) == []


def test_the_defaults_the_readme_gives_are_the_code_s():
    documented = _documented()
    recall_defaults = RecallConfig()
    wrong = []
    for variable, name in _variables().items():
        field = Settings.model_fields[name]
        default = field.default
        if default is None and name.startswith("recall_"):
            # Unset, recall keeps RecallConfig's default: that is the one the table gives.
            default = getattr(recall_defaults, name.removeprefix("recall_"))
        for shown in documented.get(variable, []):
            if shown is None:
                continue
            if isinstance(default, bool | int | float | Path) or (isinstance(default, str) and default):
                if not _same(default, shown):
                    wrong.append(f"{variable}: code {default!r}, README {shown!r}")
                continue
            if default is not None:
                continue
            # Unset means derived (from the home, the model, the CPUs): the row must say so in
            # words, not give one of the setting's values as if it were the default.
            choices = {str(choice) for choice in typing.get_args(field.annotation) for choice in
                       (typing.get_args(choice) or (choice,))}  # fmt: skip
            if shown in choices:
                wrong.append(f"{variable}: unset is derived in the code, README gives {shown!r}")
    assert wrong == []
