"""The agent's loop: marks (tombstones and pins), proposals, folding them into runs, forget."""
