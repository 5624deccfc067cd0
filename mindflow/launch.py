"""Runs of the code location's jobs for the CLI: executed here, or submitted to a running Dagster UI.

With mindflow/runner.py, mindflow/pool.py and mindflow/resources.py, a library module that
knows Dagster. Two ways, both through Dagster's public API:

- `execute`: the job is rebuilt from the code location (`build_reconstructable_job` on
  definitions.py) and executed in this process by `execute_job`. The run records the job's code
  origin (re-executable with `ReexecutionOptions`) and the code location's repository tag, which
  is how the UI's job page lists its runs. The UI's timeline and its Re-execute button need a
  workspace origin, which only a launch through the workspace gives a run.
- `submit`: the run goes to a running Dagster UI through its GraphQL API (`DagsterGraphQLClient`),
  which launches it from its workspace exactly as its own Launch button does; the UI's daemon
  executes it and this process follows it to its end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from mindflow.errors import MindflowError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WORKSPACE_YAML = PROJECT_ROOT / "workspace.yaml"
# The code location as workspace.yaml names it, and the repository a `Definitions` object makes.
LOCATION = "mindflow"
REPOSITORY = "__repository__"
# The tag the UI filters a job's Runs tab by (Dagster's system tag `.dagster/repository`).
REPOSITORY_TAG = {".dagster/repository": f"{REPOSITORY}@{LOCATION}"}
_FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


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
    tags = {**REPOSITORY_TAG, **tags}
    with dg.execute_job(
        recon, instance, run_config=run_config, tags=tags, raise_on_error=False, reexecution_options=options
    ) as result:
        return result


def client(url: str):
    """A GraphQL client of the Dagster UI at `url` (http://host:port[/prefix])."""
    from dagster_graphql import DagsterGraphQLClient

    parts = urlsplit(url if "//" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MindflowError(f"MINDFLOW_DAGSTER_URL {url!r} is not a URL like http://127.0.0.1:3000")
    return DagsterGraphQLClient(
        parts.hostname,
        port_number=parts.port,
        use_https=parts.scheme == "https",
        path_prefix=parts.path.rstrip("/"),
        timeout=30,
    )


def submit(url: str, job: str, *, run_config: dict, tags: dict[str, str]) -> str:
    """Launch a run of `job` through the Dagster UI at `url`, as its Launch button would; its run id."""
    import urllib.error
    import urllib.request

    from dagster_graphql import DagsterGraphQLClientError

    ui = client(url)
    try:
        # The UI's own health page: a refused connection or another server is named as such.
        with urllib.request.urlopen(f"{url.rstrip('/')}/server_info", timeout=10) as answer:
            known = b"dagster_webserver_version" in answer.read()
    except (OSError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MindflowError(
            f"no Dagster UI answers at MINDFLOW_DAGSTER_URL={url} ({reason}); start it with `make dev`, "
            "or unset MINDFLOW_DAGSTER_URL to execute runs in this process"
        ) from exc
    if not known:
        raise MindflowError(f"MINDFLOW_DAGSTER_URL={url} answers, but not as a Dagster UI")
    try:
        return ui.submit_job_execution(
            job,
            repository_location_name=LOCATION,
            repository_name=REPOSITORY,
            run_config=run_config,
            tags=tags,
        )
    except DagsterGraphQLClientError as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise MindflowError(f"the Dagster UI at {url} refused the {job} run: {first}") from exc


def follow(url: str, run_id: str, say: Callable[[str], None], poll_s: float = 0.5) -> str:
    """Wait for the submitted run to finish; its final status (SUCCESS, FAILURE or CANCELED).

    Announces through `say` when the run waits in the UI's queue (pool `duckdb` busy) and when it
    starts. Interrupting the wait leaves the run to the UI, where it goes on.
    """
    ui = client(url)
    said = None
    while True:
        status = ui.get_run_status(run_id).value
        if status in _FINISHED:
            return status
        if status != said and status in ("QUEUED", "STARTED"):
            say(f"run {run_id} {'queued in' if status == 'QUEUED' else 'started by'} the Dagster UI at {url}")
            said = status
        time.sleep(poll_s)


def run_events(instance, run_id: str) -> list:
    """The Dagster events of a finished run, from the instance's event log."""
    return [entry.dagster_event for entry in instance.all_logs(run_id) if entry.dagster_event is not None]


def first_error(events: Iterable) -> str:
    """The user's error of a failed run's first failure event, as one line ("" when there is none)."""
    failure = next((e for e in events if e.is_failure and e.event_specific_data), None)
    error = getattr(failure.event_specific_data, "error", None) if failure else None
    while error is not None and error.cause is not None:
        error = error.cause  # the user's error, not Dagster's wrapper around it
    if error is None:
        return ""
    # Keep the lines after the first: a failed check names itself there.
    lines = [line.strip() for line in error.message.strip().splitlines() if line.strip()]
    return " ".join(lines[:5])
