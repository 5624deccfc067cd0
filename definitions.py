"""The mindflow code location: every asset, job, schedule, sensor and resource."""

import gc
import warnings

import dagster as dg

# `backfill_policy` (a range of days in one run) is beta in Dagster 1.13: each asset declaring it
# warned once per process loading this code location (`dagster dev` runs several). A warnings
# filter is Dagster's documented way to accept lifecycle warnings ("Filtering API lifecycle
# warnings"); it comes before the assets are imported, and covers only beta and preview APIs,
# so deprecations still show.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

from assets.audit import audit_archive
from assets.clusters import clusters
from assets.decay import decay_scores
from assets.ebooks import ebook_chunks
from assets.episodes import episodes
from assets.facts import facts_graph
from assets.forget import erasures
from assets.journal import journal
from assets.journal_chunks import journal_chunks
from assets.memories import memories
from assets.nodes import nodes, scene_notes
from assets.reflections import applied_proposals, reflections
from assets.story import core_memory, story
from jobs.audit import audit_digest_job, monthly_audit_digest
from jobs.decay import decay_job, nightly_decay
from jobs.ebooks import ebook_reindex_job, weekly_ebook_reindex
from jobs.extraction import extraction_job
from jobs.forget import forget_job
from jobs.form import form_job
from jobs.ingest import ingest_job
from jobs.journal import journal_reindex_job
from jobs.loggers import LOGGERS
from jobs.narrative import narrative_job, nightly_narrative
from jobs.patrol import nightly_patrol, patrol_job
from jobs.reflection import approvals_job, nightly_reflection, reflection_job
from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource, MindflowHome
from sensors.ebooks import ebook_folder_sensor
from sensors.failures import run_failure_alert, run_recovery
from sensors.forget import forget_sensor
from sensors.form import form_sensor
from sensors.inbox import inbox_sensor
from sensors.journal import journal_files_sensor
from sensors.narrative import narrative_sensor
from sensors.reflection import approvals_sensor, reflection_sensor
from sensors.runs import stale_run_sensor

defs = dg.Definitions(
    assets=[episodes, scene_notes, nodes, clusters, journal, decay_scores, memories, facts_graph,
            story, core_memory, journal_chunks, audit_archive, ebook_chunks, erasures, reflections,
            applied_proposals],
    jobs=[ingest_job, extraction_job, patrol_job, decay_job, narrative_job, audit_digest_job,
          ebook_reindex_job, forget_job, form_job, journal_reindex_job, reflection_job, approvals_job],
    schedules=[nightly_patrol, nightly_decay, nightly_narrative, monthly_audit_digest, weekly_ebook_reindex,
               nightly_reflection],
    sensors=[inbox_sensor, narrative_sensor, ebook_folder_sensor, stale_run_sensor, forget_sensor,
             form_sensor, journal_files_sensor, reflection_sensor, approvals_sensor, run_failure_alert,
             run_recovery],
    loggers=LOGGERS,
    # Fields from the environment are dg.EnvVars (named in the UI's Resources tab) where set.
    resources={
        "duckdb": DuckDBResource.from_environment(),
        "lancedb": LanceDBResource.from_environment(),
        "embeddings": EmbeddingResource.from_environment(),
        "mindflow_home": MindflowHome.from_environment(),
    },
)

# The objects alive once the code location is loaded (Dagster's and the other imports', ~145,000)
# are left out of the garbage collector's full passes: none of them is garbage, and each pass
# walks them all (68 ms a pass here). A run the daemon or the UI launches executes in a process
# that loaded this module; the CLI's own runs freeze the same way (`runner._imports_frozen`),
# which halved the time in full passes over ingest + patrol of LoCoMo (1.42 -> 0.71 s).
gc.freeze()
