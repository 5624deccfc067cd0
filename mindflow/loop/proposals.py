"""Proposals: every change that waits for a person's decision, in one store.

A forget asks first and applies only on confirm; reflection in review mode and
sub-agents propose the same way. Each proposal is one JSON file,
`proposals/<being>/<proposal_id>.json`, replaced atomically: the read API, the CLI and
the runs share it without DuckDB. Decisions go through a per-being lock, so two
confirms of the same proposal cannot both win: the second gets a Conflict (HTTP 409).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from mindflow.errors import Conflict, MindflowError, NotFound
from mindflow.files import atomic_write
from mindflow.inbox import validate_being_id
from mindflow.models import utcnow

STATUSES = ("pending", "approved", "rejected", "deferred")
# A decision can still be taken on these; approved and rejected are final.
OPEN = ("pending", "deferred")
# forget: a forget's candidates; merge, archive, contradiction, procedure, core: reflection's
# (mindflow.reflection); memory: a sub-agent's; procedure also: a posted procedure.
KINDS = ("forget", "merge", "archive", "contradiction", "procedure", "core", "memory")
PROPOSAL_ID = re.compile(r"^p-[0-9a-f]{8,64}$")


@dataclass(frozen=True)
class Proposal:
    proposal_id: str
    being_id: str
    kind: str
    payload: dict[str, Any]
    status: str = "pending"
    created_at: datetime = field(default_factory=utcnow)
    created_by: str = "user"
    decided_by: str | None = None
    decided_at: datetime | None = None
    # When the decision took effect: at confirm for a soft forget (its mark holds on every
    # server at once), when a run carried it out for the rest (the `forget` run, `approvals`).
    applied_at: datetime | None = None
    run_id: str | None = None

    def to_json(self) -> bytes:
        data = asdict(self)
        for key in ("created_at", "decided_at", "applied_at"):
            data[key] = data[key].isoformat() if data[key] is not None else None
        return json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Proposal:
        data = json.loads(raw)
        for key in ("created_at", "decided_at", "applied_at"):
            if data.get(key) is not None:
                value = datetime.fromisoformat(data[key])
                data[key] = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return cls(**data)


def new_proposal_id() -> str:
    return "p-" + uuid.uuid4().hex


def check_proposal_id(proposal_id: str) -> str:
    if not isinstance(proposal_id, str) or not PROPOSAL_ID.match(proposal_id):
        raise NotFound(f"no proposal {proposal_id!r}")
    return proposal_id


class ProposalStore:
    """The proposals under one folder (`settings.proposals`)."""

    def __init__(self, root: Path):
        self.root = root

    def _path(self, being_id: str, proposal_id: str) -> Path:
        return self.root / validate_being_id(being_id) / f"{check_proposal_id(proposal_id)}.json"

    @contextmanager
    def _locked(self, being_id: str) -> Iterator[None]:
        folder = self.root / validate_being_id(being_id)
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder / ".lock"), timeout=30):
            yield

    def create(
        self,
        being_id: str,
        kind: str,
        payload: dict[str, Any],
        created_by: str,
        proposal_id: str | None = None,
    ) -> Proposal:
        """A new pending proposal; with a `proposal_id` that exists already, that one (a retried create)."""
        if kind not in KINDS:
            raise MindflowError(f"unknown proposal kind {kind!r}; use one of {', '.join(KINDS)}")
        proposal = Proposal(
            proposal_id=check_proposal_id(proposal_id) if proposal_id else new_proposal_id(),
            being_id=validate_being_id(being_id),
            kind=kind,
            payload=payload,
            created_by=created_by,
        )
        with self._locked(being_id):
            path = self._path(being_id, proposal.proposal_id)
            if path.is_file():
                return self._read(path)
            atomic_write(path, proposal.to_json())
        return proposal

    def _read(self, path: Path) -> Proposal:
        try:
            return Proposal.from_json(path.read_bytes())
        except (ValueError, TypeError, KeyError) as exc:
            raise MindflowError(f"proposal file {path.name} is unreadable ({exc}); remove it") from exc

    def get(self, being_id: str, proposal_id: str) -> Proposal:
        """The proposal; NotFound for an unknown id, with the same message for another being's."""
        path = self._path(being_id, proposal_id)
        if not path.is_file():
            raise NotFound(f"no proposal {proposal_id!r} for being {being_id!r}")
        return self._read(path)

    def list(self, being_id: str, status: str | None = None, kind: str | None = None) -> list[Proposal]:
        """The being's proposals, oldest first."""
        if status is not None and status not in STATUSES:
            raise MindflowError(f"unknown proposal status {status!r}; use one of {', '.join(STATUSES)}")
        if kind is not None and kind not in KINDS:
            raise MindflowError(f"unknown proposal kind {kind!r}; use one of {', '.join(KINDS)}")
        folder = self.root / validate_being_id(being_id)
        if not folder.is_dir():
            return []
        found = []
        for path in folder.glob("p-*.json"):
            proposal = self._read(path)
            if (status is None or proposal.status == status) and (kind is None or proposal.kind == kind):
                found.append(proposal)
        return sorted(found, key=lambda p: (p.created_at, p.proposal_id))

    def decide(
        self,
        being_id: str,
        proposal_id: str,
        status: str,
        decided_by: str,
        payload: dict[str, Any] | None = None,
        apply: Callable[[], None] | None = None,
        applied: bool = False,
    ) -> Proposal:
        """Approve, reject or defer an open proposal; Conflict if it was approved or rejected already.

        `apply` carries the decision out under the lock, after the check and before the new
        status is written: two confirms cannot both apply, and a crash in between leaves the
        proposal open, so confirming it again finishes the job (applying twice is harmless).
        `applied`: what `apply` did is the whole effect, so the proposal is applied as it is
        decided (no run has anything left to carry out).
        """
        if status not in STATUSES or status == "pending":
            raise MindflowError(f"a decision is one of approved, rejected, deferred; not {status!r}")
        with self._locked(being_id):
            current = self.get(being_id, proposal_id)
            if current.status not in OPEN:
                raise Conflict(
                    f"proposal {proposal_id} was already {current.status} "
                    f"by {current.decided_by or 'someone'} at {current.decided_at:%Y-%m-%dT%H:%M:%SZ}; "
                    "make a new one to change it"
                )
            now = utcnow()
            decided = replace(
                current,
                status=status,
                decided_by=decided_by,
                decided_at=now,
                applied_at=now if applied else current.applied_at,
                payload=current.payload if payload is None else payload,
            )
            if apply is not None:
                apply()
            atomic_write(self._path(being_id, proposal_id), decided.to_json())
        return decided

    def mark_applied(self, being_id: str, proposal_id: str, run_id: str | None) -> Proposal:
        """Record that a run carried out an approved proposal (idempotent)."""
        with self._locked(being_id):
            current = self.get(being_id, proposal_id)
            if current.applied_at is not None:
                return current
            applied = replace(current, applied_at=utcnow(), run_id=run_id)
            atomic_write(self._path(being_id, proposal_id), applied.to_json())
        return applied

    def rewrite(self, being_id: str, proposal_id: str, payload: dict[str, Any]) -> Proposal:
        """Replace a proposal's payload, e.g. its texts by their hashes after a permanent forget."""
        with self._locked(being_id):
            current = self.get(being_id, proposal_id)
            rewritten = replace(current, payload=payload)
            atomic_write(self._path(being_id, proposal_id), rewritten.to_json())
        return rewritten

    def beings(self) -> list[str]:
        """Beings that have a proposal folder."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())
