"""A job of the code location executed in this process as a run of that code location.

With mindflow/runner.py, mindflow/pool.py and mindflow/resources.py, a library module that
knows Dagster. `JobDefinition.execute_in_process` and `dagster.execute_job` record runs
without the code location's origin: the UI leaves such runs out of the job's Runs tab and
of the Overview timeline (both select runs by the origin's `repository@location` label),
and its "Re-execute" fails (`CheckError: Expected non-None value`), because it looks the
job up in the workspace by that origin. Dagster has no public API that executes a run in
the calling process with that origin, so this module uses three internal names
(`location_origins_from_yaml_paths`, `RemoteRepositoryOrigin`, `execute_run`), kept here
alone: the run is created with the origin the UI loads from workspace.yaml, then executed
here, in process, with the in-process executor the jobs declare.
"""

from __future__ import annotations

import sys
from functools import cache
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


@cache
def _repository_origin():
    """The origin the UI gives the code location's repository, from workspace.yaml (no server)."""
    from dagster._core.remote_origin import RemoteRepositoryOrigin
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    (location,) = location_origins_from_yaml_paths([str(WORKSPACE_YAML)])
    return RemoteRepositoryOrigin(location, definitions().get_repository_def().name)


def location_label() -> str:
    """`repository@location`, the label the UI selects a job's runs by (`.dagster/repository`)."""
    return _repository_origin().get_label()


def execute(instance, job: str, *, run_config: dict, tags: dict[str, str]):
    """Create a run of `job` carrying the code location's origin, and execute it here.

    Returns Dagster's execution result (its events, `run_id`, `success`); a failure of a
    step is in the result, not raised.
    """
    import dagster as dg
    from dagster._core.execution.api import execute_run

    recon = dg.build_reconstructable_job(
        __name__, code_location_job.__name__, (job,), reconstructor_working_directory=str(PROJECT_ROOT)
    )
    job_def = recon.get_definition()
    run = instance.create_run_for_job(
        job_def,
        run_config=run_config,
        tags={**job_def.run_tags, **tags},
        remote_job_origin=_repository_origin().get_job_origin(job),
        job_code_origin=recon.get_python_origin(),
    )
    return execute_run(recon, run, instance, raise_on_error=False)
