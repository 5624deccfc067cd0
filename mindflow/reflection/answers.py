"""The seed's answers to a pending reflection, as a person types them: `approve all`, `approve 1,3`,
`reject 2`, `defer 5`, `edit 4 "new text"` or `edit 2 target=<ref>`.

Numbers are the items' numbers in pending-reflection.md and `mindflow review` (oldest first).
Sub-agent proposals in manual mode are left out of "all": each needs its own decision.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from mindflow.errors import MindflowError
from mindflow.reflection.decide import Edit
from mindflow.reflection.items import Item

VERBS = ("approve", "reject", "defer", "edit")


@dataclass
class Answer:
    decisions: dict[str, str] = field(default_factory=dict)  # proposal id -> approve | reject | defer
    edits: dict[str, Edit] = field(default_factory=dict)

    def merge(self, other: Answer) -> None:
        self.decisions.update(other.decisions)
        self.edits.update(other.edits)


def in_all(item: Item) -> bool:
    """Whether "approve all" covers the item (not a sub-agent proposal held for manual review)."""
    return item.proposal.payload.get("review") != "manual"


def numbers(spec: str, items: list[Item]) -> list[Item]:
    """`1,3`, `2-4` or `all` as the items they name; an unknown number is an error, not skipped."""
    by_number = {i.number: i for i in items}
    if spec.strip().lower() == "all":
        return [i for i in items if in_all(i)]
    found: list[Item] = []
    for part in (p.strip() for p in spec.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not match:
            raise MindflowError(f"not an item number: {part!r} (write 1,3 or 2-4 or all)")
        first, last = int(match[1]), int(match[2] or match[1])
        for n in range(first, last + 1):
            if n not in by_number:
                raise MindflowError(f"no pending item {n}; the items are 1-{len(items)}")
            found.append(by_number[n])
    return found


def parse(line: str, items: list[Item]) -> Answer:
    """One typed answer; several may be joined with ';' (`approve 1,3; reject 2`)."""
    answer = Answer()
    for clause in (c.strip() for c in line.split(";")):
        if not clause:
            continue
        try:
            words = shlex.split(clause)
        except ValueError as exc:
            raise MindflowError(f"cannot read {clause!r}: {exc}") from exc
        verb = words[0].lower()
        if verb not in VERBS or len(words) < 2:
            raise MindflowError(
                f"cannot read {clause!r}: answer approve all | approve 1,3 | reject 2 | defer 5 | "
                'edit 4 "new text" | edit 2 target=<ref>'
            )
        if verb == "edit":
            answer.merge(edit(words[1], " ".join(words[2:]), items))
            continue
        for item in numbers(" ".join(words[1:]), items):
            answer.decisions[item.proposal_id] = verb
    return answer


def edit(number: str, change: str, items: list[Item]) -> Answer:
    """Approve item `number` with a new text, or a new target (`target=<ref or value>`)."""
    named = numbers(number, items) if number.strip().lower() != "all" else []
    if len(named) != 1:
        raise MindflowError('edit one item at a time: edit 4 "new text"')
    item = named[0]
    change = change.strip()
    if not change:
        raise MindflowError(f'edit {number} needs the new text: edit {number} "..." (or target=<ref>)')
    if change.startswith("target="):
        found = Edit(target=change.removeprefix("target="))
    else:
        found = Edit(text=change)
    return Answer({item.proposal_id: "approve"}, {item.proposal_id: found})
