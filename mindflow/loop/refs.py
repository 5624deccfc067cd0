"""The ref a memory will have once formed, known as soon as its episode is accepted."""

from __future__ import annotations

import hashlib


def episode_memory_ref(being_id: str, episode_id: str) -> str:
    """The node id the mechanical ❶ gives the episode's memory (`patrol.step_scenes`: one scene
    per episode, scene_id 's-' + sha256(being \\x1f episode)[:24], node_id 'n-' + the same).

    A fresh memory carries it, so a pin or a forget set before the form run still names
    the node afterwards."""
    digest = hashlib.sha256(f"{being_id}\x1f{episode_id}".encode()).hexdigest()[:24]
    return "n-" + digest
