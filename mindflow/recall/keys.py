"""Facts as extra full-text keys of the memories they came from (LongMemEval's K = V + fact).

With an extraction model, a memory's episodes yield facts ("Lena | bought | an apartment in
Lisbon") whose words the memory's own text may never use ("we signed the papers today"). The
published row's `search_text` is the memory's text followed by its current facts (neither
superseded nor forgotten), and the full-text index covers `search_text`: a question in the
fact's words finds the memory, which recall still returns and shows by its own text. Without a
model there are no facts and `search_text` is the text. MINDFLOW_RECALL_FACT_KEYS=false
publishes the text alone.
"""

from __future__ import annotations

SEPARATOR = " ; "


def fact_keys_sql() -> str:
    """A query of (node_id, keys): each memory's current facts as one string, in a stable order.

    Only facts drawn from the memory's own episodes (all of them): a permanent forget erases
    every memory and every fact of a forgotten episode, so no memory that survives it holds
    a key that came from it.
    """
    return f"""
        SELECT n.node_id, string_agg(DISTINCT f.line, '{SEPARATOR}' ORDER BY f.line) AS keys
        FROM (
            SELECT node_id, being_id, source_episode_ids, unnest(source_episode_ids) AS episode_id
            FROM nodes
        ) n
        JOIN (
            SELECT being_id, concat_ws(' ', entity, key, value) AS line, source_episode_ids,
                   source_episode_ids[1] AS episode_id
            FROM facts
            WHERE invalid_at IS NULL AND forgotten_at IS NULL AND len(source_episode_ids) > 0
        ) f ON f.being_id = n.being_id AND f.episode_id = n.episode_id
        WHERE list_has_all(n.source_episode_ids, f.source_episode_ids)
        GROUP BY n.node_id
    """


def search_text_sql(text: str, keys: str, enabled: bool) -> str:
    """The SQL expression of a memory's full-text document from its `text` and `keys` columns."""
    if not enabled:
        return text
    return f"CASE WHEN {keys} IS NULL THEN {text} ELSE concat({text}, chr(10), {keys}) END"
