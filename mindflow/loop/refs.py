"""Memory refs: the one a memory will have once formed, and the answer for one a being lacks."""

from __future__ import annotations

import hashlib

from mindflow.errors import NotFound


def unknown_memory(being_id: str, ref: str) -> NotFound:
    """The 404 of every read and decision naming a memory the being does not have: the same
    words whether the ref never existed, is another being's or was deleted for good, so
    nothing about it leaks."""
    return NotFound(f"being {being_id!r} has no memory {ref!r}; list its memories to find a ref")


def episode_memory_ref(being_id: str, episode_id: str) -> str:
    """The node id the mechanical ❶ gives the episode's memory (`patrol.step_scenes`: one scene
    per episode, scene_id 's-' + sha256(being \\x1f episode)[:24], node_id 'n-' + the same).

    A fresh memory carries it, so a pin or a forget set before the form run still names
    the node afterwards."""
    digest = hashlib.sha256(f"{being_id}\x1f{episode_id}".encode()).hexdigest()[:24]
    return "n-" + digest
