"""Policies shared by assets: retries where a step calls a model or object storage, and freshness."""

from datetime import timedelta

import dagster as dg

# A provider's outage past the LLM client's own retries, a timeout, or a dropped connection
# or commit conflict on object storage fails the step; Dagster runs it again 10 s, then 20 s
# later (jittered, so parallel runs do not retry in step). Each of these steps is safe to
# repeat: LanceDB publishing upserts rows keyed by ref from DuckDB's state, patrol and
# extraction start from what the stores hold (a batch whose answer failed is asked again),
# the narrative restarts from its anchor, and applying a proposal twice changes nothing more.
# `erasures` has none: a permanent forget that failed is for a person to look at.
EXTERNAL_CALLS = dg.RetryPolicy(
    max_retries=2, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)

# The nightly schedules (decay 03:00, patrol) refresh these; a day and an hour without a new
# materialization means a night was missed, and the UI marks the asset as failing freshness
# (evaluated by the daemon `make dev` starts). The hour leaves the night's run time to finish.
NIGHTLY = dg.FreshnessPolicy.time_window(fail_window=timedelta(days=1, hours=1))
