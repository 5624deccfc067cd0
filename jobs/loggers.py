"""The loggers every job gets: Dagster's console logger, and the progress lines of long CLI runs."""

import dagster as dg

from mindflow.progress import progress_logger


@dg.logger(
    config_schema={
        "after_s": dg.Field(
            float,
            is_required=False,
            default_value=-1.0,
            description="Print progress lines (N/M) on stderr once the run has lasted this many seconds; "
            "negative (the default, for runs launched from the UI, whose console logger shows "
            "everything): never. `mindflow run` sets MINDFLOW_PROGRESS_AFTER_S.",
        )
    },
    description="Progress lines of a long run on stderr, for `mindflow run`.",
)
def progress(init_context: dg.InitLoggerContext):
    return progress_logger(init_context.logger_config["after_s"])


LOGGERS = {"console": dg.colored_console_logger, "progress": progress}
