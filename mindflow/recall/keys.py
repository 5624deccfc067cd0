"""Extra full-text keys of a memory: its facts and its scene's keyphrases (LongMemEval's K = V + fact).

With an extraction model, a memory's episodes yield facts ("Lena | bought | an apartment in
Lisbon") and its scene keyphrases ("apartment purchase") whose words the memory's own text
may never use ("we signed the papers today"). The published row's `search_text` is the
memory's text followed by its keys, and the full-text index covers `search_text`: a question
in a key's words finds the memory, which recall still returns and shows by its own text.
Without a model there are no facts and no keyphrases, and `search_text` is the text.
MINDFLOW_RECALL_FACT_KEYS=false and MINDFLOW_RECALL_KEYPHRASE_KEYS=false leave each kind out.
"""

from __future__ import annotations

SEPARATOR = " ; "


def keys_sql(facts: bool = True, keyphrases: bool = True) -> str:
    """A query of (node_id, keys): each memory's keys as one string, in a stable order.

    Facts: the current ones (neither superseded nor forgotten). Keyphrases: those of the
    model's scenes. Only keys drawn from the memory's own episodes (all of them): a permanent
    forget erases every memory, scene and fact of a forgotten episode, so no memory that
    survives it holds a key that came from it.
    """
    sources = []
    if facts:
        sources.append(
            """
            SELECT being_id, concat_ws(' ', entity, key, value) AS line, source_episode_ids AS episode_ids
            FROM facts
            WHERE invalid_at IS NULL AND forgotten_at IS NULL AND len(source_episode_ids) > 0
            """
        )
    if keyphrases:
        sources.append(
            """
            SELECT being_id, unnest(keyphrases) AS line, episode_ids
            FROM scene_notes
            WHERE note_status = 'ok' AND len(keyphrases) > 0 AND len(episode_ids) > 0
            """
        )
    if not sources:
        return "SELECT NULL::VARCHAR AS node_id, NULL::VARCHAR AS keys WHERE false"
    return f"""
        SELECT n.node_id, string_agg(DISTINCT k.line, '{SEPARATOR}' ORDER BY k.line) AS keys
        FROM (
            SELECT node_id, being_id, source_episode_ids, unnest(source_episode_ids) AS episode_id
            FROM nodes
        ) n
        JOIN (
            SELECT being_id, line, episode_ids, episode_ids[1] AS episode_id
            FROM ({" UNION ALL ".join(sources)})
        ) k ON k.being_id = n.being_id AND k.episode_id = n.episode_id
        WHERE list_has_all(n.source_episode_ids, k.episode_ids)
        GROUP BY n.node_id
    """


def search_text_sql(text: str, keys: str) -> str:
    """The SQL expression of a memory's full-text document from its `text` and `keys` columns."""
    return f"CASE WHEN {keys} IS NULL THEN {text} ELSE concat({text}, chr(10), {keys}) END"
