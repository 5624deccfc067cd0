"""The mindflow code location: every asset, job, schedule, sensor and resource."""

import dagster as dg

from assets.clusters import clusters
from assets.decay import decay_scores
from assets.episodes import episodes
from assets.facts import facts_graph
from assets.memories import memories
from assets.nodes import nodes, scene_notes
from jobs.decay import decay_job, nightly_decay
from jobs.ingest import ingest_job
from jobs.patrol import nightly_patrol, patrol_job
from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource, MindflowHome
from sensors.inbox import inbox_sensor

defs = dg.Definitions(
    assets=[episodes, scene_notes, nodes, clusters, decay_scores, memories, facts_graph],
    jobs=[ingest_job, patrol_job, decay_job],
    schedules=[nightly_patrol, nightly_decay],
    sensors=[inbox_sensor],
    resources={
        "duckdb": DuckDBResource(),
        "lancedb": LanceDBResource(),
        "embeddings": EmbeddingResource(),
        "mindflow_home": MindflowHome(),
    },
)
