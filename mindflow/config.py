"""Typed settings read from the environment and `.env` (prefix MINDFLOW_)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# At the usual ~4 characters a token of English prose, about 8,000 tokens: a long message or
# note, well short of a pasted log or file dump.
MAX_EPISODE_CHARS = 32_000
# USD per million (input, output) tokens, by model name (prefix match); override with
# MINDFLOW_LLM_PRICES='{"my-model": [0.5, 1.5]}'. Local models cost nothing.
LLM_PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-haiku-4": (1.0, 5.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4o": (2.5, 10.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1": (2.0, 8.0),
}


@dataclass(frozen=True)
class ObjectStore:
    """A place on S3-compatible object storage (`s3://bucket/prefix`) and the options to reach it.

    Settings.lance_path is one of these, or a local folder; mindflow.lance connects to either."""

    uri: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def storage_options(self) -> dict[str, str]:
        return dict(self.options)

    def __str__(self) -> str:
        return self.uri


# New homes embed with int8 weights (as good on LoCoMo's leave-one-out recall, ~2x faster).
# Homes whose memories were embedded in float32 before that keep float32: a query must be
# embedded as the stored vectors were. A file beside the DuckDB file pins each home's
# precision (written when its schema is created or migrated to version 15); the read API,
# which never opens DuckDB, reads it too, and takes a DuckDB file without a pin for an
# older home (a server may start on an upgraded home before any job has migrated it).
PRECISIONS = ("fp32", "int8")
DEFAULT_PRECISION = "int8"
PRECISION_PIN = "embedding_precision"


def pinned_precision(home: Path) -> str | None:
    try:
        value = (home / PRECISION_PIN).read_text().strip()
    except OSError:
        return None
    return value if value in PRECISIONS else None


class Settings(BaseSettings):
    """Where mindflow keeps its state and which embedding model it uses.

    Every field can be set as MINDFLOW_<NAME> in the environment or in `.env`.
    """

    model_config = SettingsConfigDict(env_prefix="MINDFLOW_", env_file=".env", extra="ignore")

    home: Path = Field(default=Path("data"), description="MINDFLOW_HOME: the folder holding all state.")
    embedding_model: str = Field(
        default=DEFAULT_MODEL,
        description="all-MiniLM-L6-v2 (bundled, offline), any sentence-transformers name or path, "
        "or openai:text-embedding-3-small (needs OPENAI_API_KEY).",
    )
    embedding_batch_size: int = 64
    embedding_runtime: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="How a local model embeds: onnx runs its graph (exported once into the models "
        "folder) through onnxruntime, torch through sentence-transformers. The vectors are the same "
        "(float32, checked at export), so the embedding cache and vector tables stay valid either way.",
    )
    embedding_precision: Literal["fp32", "int8"] | None = Field(
        default=None,
        description="Precision of a local model's weights on the onnx runtime: int8 (dynamic "
        "quantisation: ~2x faster, the same LoCoMo recall) or fp32. Unset: what the home is pinned to "
        "(homes from before int8 stay fp32), else int8. The embedding cache keys name it "
        "(model@fp32, model@int8), but memories keep the vectors they were stored with: set it "
        "before a home's first patrol.",
    )
    ingest_max_gap_days: int = Field(
        default=30,
        description="An ingest of pending files starts a new run where their days lie further apart: "
        "on Dagster's SQLite event log a day of a range run cost ~8 ms and a run ~0.25 s (measured "
        "in one process, a two-year range against one day), so gaps up to about a month cost less "
        "as one run.",
    )
    max_episode_chars: int = Field(
        default=MAX_EPISODE_CHARS,
        ge=1,
        description="Longer episode texts are quarantined when landed or ingested, and POST episodes "
        "answers 422: recall returns whole texts, so one huge episode would fill every answer it is in.",
    )
    duckdb_lock_timeout_s: float = Field(
        default=600.0, description="How long a job waits for another process holding the DuckDB file."
    )
    duckdb_writers: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Runs that may write the relational stores at once (pool `duckdb`'s limit). Above 1, "
        "the steps of one being (extraction, patrol, form, narrative) work on a checkout of that "
        "being's rows and merge it back when they finish; a checkout whose being changed meanwhile "
        "is retried (mindflow/checkout.py).",
    )
    failure_webhook_url: str | None = Field(
        default=None,
        description="A failed run of any mindflow job is POSTed here as JSON (job, run id, partition, "
        "times, first error line); unset: recorded in the audit log and `mindflow status` only.",
    )
    failure_webhook_timeout_s: float = Field(
        default=5.0, gt=0, description="How long the run-failure sensor waits for the webhook to answer."
    )
    dagster_url: str | None = Field(
        default=None,
        description="A running Dagster UI (`make dev`, e.g. http://127.0.0.1:3000): `mindflow run` submits "
        "its runs there, so they are the UI's own runs (in the job's Runs tab, the timeline, re-executable "
        "from the UI) and the UI's daemon executes them; unset: the CLI executes them itself.",
    )
    progress_after_s: float = Field(
        default=20.0,
        ge=0,
        description="`mindflow run` prints a run's progress lines (embedded N/M ...) on stderr once the "
        "run has lasted this long; shorter runs print only their summary.",
    )
    api_tokens: SecretStr | None = Field(
        default=None,
        description="Bearer tokens of the read API, each scoped to beings: 'tokA=ada,bram;tokB=*'. "
        "Without any, `mindflow serve` binds only to loopback.",
    )
    api_max_body_bytes: int = Field(default=1_048_576, description="Larger request bodies get 413.")
    api_max_query_chars: int = Field(default=4_000, description="Longer recall queries get 422.")
    api_max_episodes: int = Field(default=1_000, description="Episodes per POST episodes request.")
    api_echo_recalls: int = Field(
        default=25, description="Echo filter: refs shown in a session's last N recalls are not repeated."
    )
    api_echo_sessions: int = Field(
        default=10_000, description="Sessions the echo filter remembers (least recently used dropped)."
    )
    api_query_cache: int = Field(default=2_048, description="Query vectors kept in memory (LRU).")
    # Recall's hybrid weights and recency floor; unset = the values measured on LoCoMo in
    # mindflow/recall/config.py (0.5 / 0.5, floor 0.9, half-life 30 days). The seed's
    # vectorWeight 0.7 / textWeight 0.3 is one alternative.
    recall_vector_weight: float | None = Field(
        default=None, ge=0, description="Weight of the vector side in hybrid recall (default 0.5)."
    )
    recall_text_weight: float | None = Field(
        default=None, ge=0, description="Weight of the full-text side in hybrid recall (default 0.5)."
    )
    recall_recency_floor: float | None = Field(
        default=None, ge=0, le=1, description="Least recency factor an old memory keeps, 0..1 (default 0.9)."
    )
    recall_half_life_days: float | None = Field(
        default=None, gt=0, description="Days after which the recency boost halves (default 30)."
    )
    recall_mmr_lambda: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="MMR's weight of relevance against novelty among the results, 0..1 (default 0.8; "
        "1 ranks by relevance alone).",
    )
    recall_time_weight: float | None = Field(
        default=None,
        ge=0,
        description="Lift of the memories written in the time a query names ('in May 2022', 'last week'; "
        "default 0.2, 0: off).",
    )
    recall_time_slack_days: float | None = Field(
        default=None,
        ge=0,
        description="Days either side of the time a query names that still count (default 3).",
    )
    recall_speaker_weight: float | None = Field(
        default=None,
        ge=0,
        description="Lift of the memories of a speaker the query names (default 0.2, 0: off).",
    )
    recall_reorder_weight: float | None = Field(
        default=None,
        ge=0,
        description="Re-order of the first 10 by the BM25 of each one's words with its neighbours' "
        "(default 0.05, 0: off).",
    )
    # The ranking levers of mindflow/recall/config.py, off by default (README, "Recall quality").
    recall_prf_terms: int | None = Field(
        default=None,
        ge=0,
        description="Pseudo-relevance feedback: words taken from the best candidates (0: off).",
    )
    recall_prf_weight: float | None = Field(
        default=None, ge=0, description="Weight of the pseudo-relevance feedback's BM25 (default 0.3)."
    )
    recall_session_weight: float | None = Field(
        default=None, ge=0, description="Session score: weight of a memory's session (0: off)."
    )
    recall_session_doc_weight: float | None = Field(
        default=None,
        ge=0,
        description="Session document: weight of the BM25 of a memory's session read as one document, from "
        "the server's hot index (0: off).",
    )
    recall_rescore_weight: float | None = Field(
        default=None, ge=0, description="Re-score of the top 30 by their own BM25: its weight (0: off)."
    )
    recall_fact_keys: bool = Field(
        default=True,
        description="Publish each memory's current facts (from an extraction model) as full-text keys of "
        "it beside its text (mindflow/recall/keys.py); without a model there are none.",
    )
    recall_keyphrase_keys: bool = Field(
        default=True,
        description="Publish the keyphrases an extraction model gave each memory's scenes as full-text keys "
        "of it beside its text (mindflow/recall/keys.py); without a model there are none.",
    )

    fact_cool_days: int = Field(
        default=30,
        ge=1,
        description="Days a Cool fact (activation below 1.0) stays in the published graph after its last "
        "access; it is never deleted from DuckDB, and an access brings it back.",
    )
    fact_decay_rate: float = Field(
        default=0.05, gt=0, description="Daily decay rate of a fact's activation (exp(-rate * days unused))."
    )

    @model_validator(mode="after")
    def _some_recall_weight(self) -> Settings:
        if self.recall_vector_weight == 0 and self.recall_text_weight == 0:
            raise ValueError(
                "MINDFLOW_RECALL_VECTOR_WEIGHT and MINDFLOW_RECALL_TEXT_WEIGHT are both 0: recall would "
                "query nothing; give one of them a positive weight"
            )
        return self

    def activation_params(self):
        """Fact activation (`ActivationParams`) with these settings' decay rate and Cool days."""
        from mindflow.fact_activation import ActivationParams

        return ActivationParams(rate=self.fact_decay_rate, cool_days=self.fact_cool_days)

    def recall_overrides(self) -> dict[str, float | int]:
        """The RecallConfig fields these settings set."""
        values = {
            "vector_weight": self.recall_vector_weight,
            "text_weight": self.recall_text_weight,
            "recency_floor": self.recall_recency_floor,
            "half_life_days": self.recall_half_life_days,
            "mmr_lambda": self.recall_mmr_lambda,
            "time_weight": self.recall_time_weight,
            "time_slack_days": self.recall_time_slack_days,
            "speaker_weight": self.recall_speaker_weight,
            "reorder_weight": self.recall_reorder_weight,
            "prf_terms": self.recall_prf_terms,
            "prf_weight": self.recall_prf_weight,
            "session_weight": self.recall_session_weight,
            "session_doc_weight": self.recall_session_doc_weight,
            "rescore_weight": self.recall_rescore_weight,
        }
        return {k: v for k, v in values.items() if v is not None}

    models_dir: Path | None = Field(
        default=None,
        description="MINDFLOW_MODELS_DIR: derived model files such as the server's ONNX query encoder "
        "(default $MINDFLOW_HOME/models); several homes may share one.",
    )
    api_hot_index_rows: int = Field(
        default=250_000,
        description="Memories the server keeps in memory for recall (vectors, times, rows; ~2.2 KB each "
        "with MiniLM), least recently used beings first out; 0 reads every recall from LanceDB.",
    )
    api_hot_index_small: int = Field(
        default=5_000,
        ge=0,
        description="A being with at most this many memories is small: the server builds its hot index "
        "itself (a first recall, the build included, of 144-300 ms for 400-5,000 memories) and its "
        "recalls wait for it after a publish instead of reading LanceDB; a larger one is built by a "
        "process of its own in the background. 0: no being is small.",
    )
    api_workers: int = Field(
        default=1,
        ge=1,
        description="Worker processes of `mindflow serve` (default 1). Several share one listening "
        "socket and map the same hot index files (written under cache/hot).",
    )
    api_rankers: int | None = Field(
        default=None,
        ge=0,
        description="Ranking processes the server hands its hot-index recalls to, a free one taking the "
        "next recall whichever connection it came on; 0: the request's thread ranks. Unset, `mindflow "
        "serve` with one worker starts one per CPU it may use (none on one CPU or with several workers), "
        "an app built otherwise (`mindflow mcp`) none.",
    )
    api_ranker_batch: int = Field(
        default=4,
        ge=1,
        description="Waiting recalls a ranking process coming free takes at once, at most (default 4); "
        "their query vectors share one int8 scan of the index (at 100,000 memories 2.1 ms for one "
        "query, 3.0 ms for four) and each answer is returned as soon as it is ranked. 1: one at a time.",
    )
    api_lone_recalls_here: bool = Field(
        default=True,
        description="With ranking processes, a recall that comes while no other is running in the "
        "worker, and none came among others in the last second, is ranked by the worker itself; the "
        "others go to the rankers. A lone recall gains nothing from a ranker and pays for waking it: "
        "at 100,000 memories, one client, p95 16.0 -> 14.6 ms over 4 alternating pairs (README). "
        "false: every recall goes to a ranker.",
    )
    api_pin_rankers: bool = Field(
        default=True,
        description="Pin each ranking process to a CPU of its own (the server's CPUs in turn) when "
        "there are no more rankers than CPUs; the worker is not pinned. At 100,000 memories on 2 "
        "CPUs, 8 clients, pinned was faster in 11 of 15 alternating pairs, by ~3.5% on average "
        "(README); a lone client's p95 ~0.3 ms slower (likely: a ranker's full-text thread is pinned "
        "with it). "
        "Off on a machine whose other work should be free to push a ranker aside.",
    )
    api_recall_threads: int = Field(
        default=1,
        ge=1,
        description="Recalls one server process ranks from its hot index at once (default 1); more "
        "wait their turn. Such a recall is CPU work under one GIL: threads ranking side by side only "
        "slow each other down, so throughput comes from --workers. Recalls read from LanceDB are not "
        "counted.",
    )
    tail_max_episodes: int = Field(
        default=2_000,
        ge=0,
        description="Unpublished episodes per being the server keeps in its fresh tail (embedded, "
        "recalled beside published memories); past it the oldest wait for the form run. 0 turns the "
        "fresh tail off.",
    )
    tail_done_window_hours: float = Field(
        default=36.0,
        ge=0,
        description="Ingested inbox files (inbox/.done) moved or changed this recently are read for the "
        "fresh tail: the form run publishes their episodes within a minute, the nightly patrol within a "
        "day at the latest, so older files hold only published episodes.",
    )
    tail_scan_interval_s: float = Field(
        default=0.5,
        ge=0,
        description="How often a server looks at a being's inbox folders for episodes other processes "
        "wrote (a stat per file; its own POSTs count at once).",
    )
    ebooks_dir: Path | None = Field(
        default=None,
        description="MINDFLOW_EBOOKS_DIR: the documents of the ebook index (default $MINDFLOW_HOME/ebooks).",
    )
    ebooks_chunk_tokens: int = Field(
        default=350,
        ge=16,
        description="Ebook chunk length in tokens of the embedding model's tokenizer; capped at the "
        "model's input window (254 for all-MiniLM-L6-v2) so no chunk text goes unembedded.",
    )
    ebooks_chunk_overlap: int = Field(default=50, ge=0, description="Tokens shared by consecutive chunks.")
    ebooks_keep_versions_days: float = Field(
        default=7.0,
        ge=0,
        description="Older versions of the `ebook_chunks` table are kept this long for rollback.",
    )
    ebooks_vector_index_min_rows: int = Field(
        default=20_000,
        ge=256,
        description="`ebook_chunks` gets a vector index (IVF_HNSW_SQ) from this many chunks on.",
    )

    # LLM layer (mindflow/llm). Nothing set = mechanical mode. Keys come only from
    # ANTHROPIC_API_KEY / OPENAI_API_KEY in the environment, never from these fields.
    llm: str | None = Field(
        default=None,
        description="Default chat model as provider:model, provider one of anthropic, openai, "
        "openai-compatible (e.g. anthropic:claude-sonnet-4-5, openai-compatible:llama3.1).",
    )
    llm_base_url: str | None = Field(
        default=None,
        description="Base URL for every provider (required for openai-compatible, e.g. "
        "http://localhost:11434/v1); a trailing /v1 is dropped for anthropic.",
    )
    llm_fallback: str | None = Field(
        default=None, description="Comma-separated provider:model list tried in order when a model fails."
    )
    llm_narrative: str | None = Field(default=None, description="Model for STORY.md / MEMORY.md.")
    llm_patrol: str | None = Field(default=None, description="Model for the patrol's ❹ ❻ roots, diary.")
    llm_reflection: str | None = Field(
        default=None,
        description="Model for reflection: meta-reflection, merge judgement, procedures, MEMORY.md.",
    )
    llm_extraction: str | None = Field(default=None, description="Model for scene and fact extraction.")
    llm_resonance: str | None = Field(
        default=None,
        description="Model for resonance's phase 1 (entities, queries) and phase 5 (the fragments "
        "rewritten); the read API calls it on every resonance request.",
    )
    resonance_budget_s: float = Field(
        default=3.0,
        gt=0,
        description="Seconds resonance may spend on its model calls; past them, or on any failure, the "
        "mechanical block is served.",
    )
    llm_timeout_s: float = Field(default=120.0, description="Per-request timeout.")
    llm_max_retries: int = Field(default=2, description="Retries per model on 429, 5xx and timeouts.")
    llm_retry_backoff_s: float = Field(default=1.0, description="First retry wait; doubles each retry.")
    llm_budget_calls: int = Field(default=500, description="Most requests one asset may send per run.")
    llm_budget_tokens: int = Field(
        default=2_000_000, description="Most input+output tokens one asset may spend per run."
    )
    llm_breaker_failures: int = Field(
        default=5,
        ge=1,
        description="A model that fails this many requests in a row (timeout, HTTP error, rejected "
        "answer) is not asked again for the rest of the run, by any step or being.",
    )
    llm_run_budget_s: float = Field(
        default=1800.0,
        gt=0,
        description="Seconds one run may spend waiting on models, all steps and beings together; "
        "past it the run goes on mechanically (extraction leaves episodes pending for the next run).",
    )
    llm_context_tokens: int | None = Field(
        default=None,
        description="Context window for batching; default from the model table, else 8,192.",
    )
    llm_prices: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: dict(LLM_PRICES),
        description="USD per million (input, output) tokens by model name, as JSON.",
    )

    # Narrative (STORY.md) and core memory (MEMORY.md), mindflow/narrative.py and core_memory.py.
    narrative_batch_tokens: int = Field(
        default=50_000, description="Safe limit of one narrative prompt: episodes are batched under it."
    )
    narrative_pending_tokens: int = Field(
        default=5_000,
        description="The narrative sensor starts a run for a being past this many "
        "estimated tokens of unnarrated episodes.",
    )
    narrative_max_words: int = Field(
        default=10_000, description="Older chapters of STORY.md are summarised when it nears this length."
    )
    narrative_lock_timeout_s: float = Field(
        default=300.0, description="How long a STORY.md writer waits for another one (STORY.md.lock)."
    )

    # Reflection and approval (Moltbot), mindflow/reflection/.
    approval_mode: Literal["auto", "review"] = Field(
        default="auto",
        description="auto: reflection, consolidation, fact supersession and MEMORY.md rewrites apply "
        "directly. review: each becomes a pending proposal and nothing applies until a person decides.",
    )
    approval_modes: str = Field(
        default="",
        description="Per-being overrides of approval_mode: 'ada=review,bram=auto'.",
    )
    subagent_mode: Literal["auto", "batch", "manual"] = Field(
        default="batch",
        description="Sub-agent proposals: auto commits those without a conflict, batch (the default) "
        "lists them in the next reflection's summary, manual leaves them to one-by-one decisions.",
    )
    reflection_session_gap_min: float = Field(
        default=30.0, gt=0, description="A session has ended after this many minutes without an episode."
    )
    reflection_max_unprocessed: int = Field(
        default=200, ge=1, description="The reflection sensor starts a cycle past this many new episodes."
    )
    reflection_budget_tokens: int = Field(
        default=8_000,
        ge=500,
        description="Output tokens one reflection cycle may write (models and summary).",
    )
    reflection_merge_cosine: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Two active memories of one cluster at or above this cosine are proposed as a merge.",
    )

    # The scale profile (README "Running at scale"): the same code on shared servers.
    dagster_postgres_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host:port/db: the Dagster instance (runs, event log, "
        "schedules) in PostgreSQL instead of SQLite files under MINDFLOW_HOME/dagster, so run "
        "workers, the daemon and the UI of several machines share it. dagster.yaml names the "
        "variable, never its value.",
    )
    lance_uri: str | None = Field(
        default=None,
        description="Where the LanceDB tables live: s3://bucket/prefix for S3-compatible object "
        "storage, read by any number of API servers; unset, the folder MINDFLOW_HOME/lance.",
    )
    s3_endpoint: str | None = Field(
        default=None,
        description="The object store's URL (http://127.0.0.1:9000 for MinIO or moto); unset, AWS S3. "
        "Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY as usual.",
    )
    s3_region: str | None = Field(default=None, description="The bucket's region (AWS_REGION otherwise).")
    s3_allow_http: bool = Field(
        default=False, description="Allow a plain-HTTP endpoint: for a server on loopback only."
    )

    @cached_property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def duckdb_path(self) -> Path:
        return self.resolved_home / "mindflow.duckdb"

    @property
    def checkouts(self) -> Path:
        """Where the steps of one being keep its rows while they run (MINDFLOW_DUCKDB_WRITERS > 1)."""
        return self.resolved_home / "checkouts"

    @property
    def encoder_precision(self) -> str:
        """The precision local embeddings run at: the setting, else the home's pin, else int8
        for a home with no stores yet and fp32 for one from before the pin."""
        if self.embedding_precision:
            return self.embedding_precision
        pinned = pinned_precision(self.resolved_home)
        if pinned:
            return pinned
        return "fp32" if self.duckdb_path.exists() else DEFAULT_PRECISION

    @property
    def lance_path(self) -> Path | ObjectStore:
        """The LanceDB tables: a local folder, or object storage with MINDFLOW_LANCE_URI."""
        if self.lance_uri and "://" in self.lance_uri and not self.lance_uri.startswith("file://"):
            options = {"aws_endpoint": self.s3_endpoint, "aws_region": self.s3_region}
            if self.s3_allow_http:
                options["allow_http"] = "true"
            return ObjectStore(self.lance_uri.rstrip("/"), tuple((k, v) for k, v in options.items() if v))
        if self.lance_uri:
            return Path(self.lance_uri.removeprefix("file://")).expanduser().resolve()
        return self.resolved_home / "lance"

    @property
    def inbox(self) -> Path:
        return self.resolved_home / "inbox"

    @property
    def hot_index(self) -> Path:
        """The hot index files every server worker maps (`mindflow.recall.hot_files`); derived, disposable."""
        return self.resolved_home / "cache" / "hot"

    @property
    def models(self) -> Path:
        """Derived model files, such as the ONNX graph the server embeds queries with."""
        return self.models_dir.expanduser().resolve() if self.models_dir else self.resolved_home / "models"

    @property
    def events(self) -> Path:
        return self.resolved_home / "events"

    @property
    def loop(self) -> Path:
        """Marks (tombstones and pins) the API appends and runs fold in: `loop/<being>/marks.jsonl`."""
        return self.resolved_home / "loop"

    @property
    def proposals(self) -> Path:
        """Changes waiting for a person's decision: `proposals/<being>/<proposal_id>.json`."""
        return self.resolved_home / "proposals"

    @property
    def workspace(self) -> Path:
        return self.resolved_home / "workspace"

    @property
    def dagster_home(self) -> Path:
        return self.resolved_home / "dagster"

    @property
    def ebooks(self) -> Path:
        if self.ebooks_dir is not None:
            return self.ebooks_dir.expanduser().resolve()
        return self.resolved_home / "ebooks"


def load_settings(**overrides) -> Settings:
    """Settings from the environment, `.env` and explicit overrides (None values ignored)."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
