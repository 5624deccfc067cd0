"""Asset `decay_scores`: the relevance and status of every memory as of a day."""

from datetime import date, datetime, timedelta

import dagster as dg

from assets.policies import NIGHTLY
from mindflow import audit
from mindflow.audit.tables import log_decay_transitions
from mindflow.decay import STATUSES, TYPE_WEIGHTS, DecayParams, run_decay
from mindflow.fact_activation import run_activation
from mindflow.loop.fold import fold_all, totals
from mindflow.models import utcnow
from mindflow.resources import DuckDBResource


class DecayConfig(dg.Config):
    """As of which day to decay: unset, now (the nightly schedule sets the night's day)."""

    as_of: str | None = None


# Not partitioned: the table holds one current score per memory, so a run as of an earlier
# day replaces today's scores instead of adding that day's. Daily partitions from 2020 showed
# years of "missing" days; a data engineer reads the run history (`as_of` on each
# materialization) and the freshness policy instead, which fails when a night is missed.
@dg.asset(
    freshness_policy=NIGHTLY,
    deps=[dg.AssetDep("nodes", partition_mapping=dg.AllPartitionMapping())],
    pool="duckdb",
    group_name="decay",
    kinds={"duckdb"},
    code_version="1",
    check_specs=[
        dg.AssetCheckSpec(
            "scores_in_range",
            asset="decay_scores",
            blocking=True,
            description="Every score lies in [0, 1.5 * the largest type weight].",
        )
    ],
)
def decay_scores(
    context: dg.AssetExecutionContext, config: DecayConfig, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Decay relevance per memory: base * exp(-0.03 * days) * log2(accesses + 1) * type weight; and each
    fact's activation, with the accesses the read API recorded (Hot, Warm, Cool). A run's row count is
    the table's memories; `scored` and the status counts are those formed by its day, `formed_later`
    those it left alone."""
    as_of = utcnow()
    if config.as_of:
        # As of a day means by its end: a day that has not ended yet is decayed as of now.
        end = datetime.combine(date.fromisoformat(config.as_of), datetime.min.time()) + timedelta(days=1)
        as_of = min(as_of, end)
    params = DecayParams()
    upper = params.cap * max(TYPE_WEIGHTS.values())
    with duckdb.connect() as con:
        integrity = audit.verify_critical(duckdb.settings(), con, run_id=context.run_id)
        # A forget or pin since the last run holds before any score is computed.
        marks = fold_all(con, duckdb.settings(), utcnow(), context.run_id)
        report = run_decay(con, as_of, params, run_id=context.run_id)
        log_decay_transitions(con, duckdb.settings(), report.transitions, run_id=context.run_id)
        facts = run_activation(con, as_of, duckdb.settings().events, duckdb.settings().activation_params())
        out_of_range, histogram = con.execute(
            "SELECT count(*) FILTER (WHERE score < 0 OR score > ?), "
            "histogram(floor(score * 4) / 4) FROM decay_scores",
            [upper],
        ).fetchone()
    bars = "\n".join(
        f"| {bucket:.2f} | {'█' * max(1, round(40 * n / max(histogram.values())))} {n} |"
        for bucket, n in sorted((histogram or {}).items())
    )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(report.statuses.values()) + report.formed_later,
            "as_of": as_of.isoformat(timespec="seconds"),
            "scored": report.scored,
            "formed_later": report.formed_later,
            "new": report.registered,
            **{status: report.statuses.get(status, 0) for status in STATUSES},
            **{f"change_{s}": n for s, n in report.changes.items()},
            "score_histogram": dg.MetadataValue.md("| score ≥ | memories |\n|---|---|\n" + bars),
            **facts.counts(),
            **totals(marks),
            **integrity.metadata(),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="scores_in_range",
                passed=out_of_range == 0,
                metadata={"out_of_range": out_of_range, "upper_bound": upper},
            )
        ],
    )
