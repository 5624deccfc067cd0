"""The nightly schedule shared by the per-being jobs: one run per known being."""

import dagster as dg

from assets.partitions import beings


def nightly_per_being(name: str, job, cron_schedule: str, description: str) -> dg.ScheduleDefinition:
    """A schedule requesting one run of `job` per known being, keyed by job, being and day,
    so a being's failure does not hold the others back."""

    @dg.schedule(
        name=name,
        job=job,
        cron_schedule=cron_schedule,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=description,
    )
    def evaluate(context: dg.ScheduleEvaluationContext):
        day = context.scheduled_execution_time.strftime("%Y-%m-%d")
        known = context.instance.get_dynamic_partitions(beings.name)
        if not known:
            return dg.SkipReason("no being has episodes yet")
        return [dg.RunRequest(run_key=f"{job.name}-{being}-{day}", partition_key=being) for being in known]

    return evaluate
