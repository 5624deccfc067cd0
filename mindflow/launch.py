"""A job of the code location executed in this process, through Dagster's public `execute_job`.

With mindflow/runner.py, mindflow/pool.py and mindflow/resources.py, a library module that
knows Dagster. The job is rebuilt from the code location (`build_reconstructable_job` on
definitions.py), so the run records the job's code origin and can be re-executed with
`execute_job(..., reexecution_options=ReexecutionOptions(parent_run_id=...))`. Dagster's UI
lists and re-executes only runs that carry a workspace origin, which no public API gives a
run executed in the calling process; the UI's own launches (and `dagster job launch`) do.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WORKSPACE_YAML = PROJECT_ROOT / "workspace.yaml"


def definitions():
    """The code location's `Definitions` (definitions.py at the repository root)."""
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))
    from definitions import defs

    return defs


def code_location_job(name: str):
    """The job `name` of the code location: how a run of it is reconstructed, here or elsewhere."""
    return definitions().resolve_job_def(name)


def execute(instance, job: str, *, run_config: dict, tags: dict[str, str], parent_run_id: str | None = None):
    """Execute a run of `job` here against `instance` (a re-execution of `parent_run_id` when given).

    Returns Dagster's `ExecuteJobResult` (its events, `run_id`, `success`); a failure of a step is
    in the result, not raised.
    """
    import dagster as dg

    recon = dg.build_reconstructable_job(
        __name__, code_location_job.__name__, (job,), reconstructor_working_directory=str(PROJECT_ROOT)
    )
    options = None
    if parent_run_id:
        options = dg.ReexecutionOptions(parent_run_id=parent_run_id)
        # The parent's partition tags (a range of beings or days) make the same run again; its
        # process tags (mindflow/pid ...) were the parent process's, not this one's.
        parent = instance.get_run_by_id(parent_run_id)
        kept = {k: v for k, v in parent.tags.items() if k.startswith("dagster/") and "partition" in k}
        tags = {**kept, **tags}
    with dg.execute_job(
        recon, instance, run_config=run_config, tags=tags, raise_on_error=False, reexecution_options=options
    ) as result:
        return result
