"""The `mindflow` command: land files, run jobs, show what memory holds."""

from __future__ import annotations

from pathlib import Path

import typer

from mindflow.config import load_settings
from mindflow.errors import MindflowError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"


def _fail(exc: MindflowError) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code=1)


@app.command()
def ingest(
    path: Path = typer.Argument(..., help="The file to land."),
    being: str = typer.Option(..., "--being", help="The being the episodes belong to."),
    format: str | None = typer.Option(
        None, "--format", help="jsonl | openclaw | daily-md (default: detected)."
    ),
) -> None:
    """Validate a file and land it in the being's inbox, where the inbox sensor or `run ingest` finds it."""
    from mindflow.inbox import land_file

    try:
        report = land_file(load_settings().inbox, path, being, format)
    except MindflowError as exc:
        _fail(exc)
    span = f", days {report.first_day} .. {report.last_day}" if report.first_day else ""
    typer.echo(
        f"landed {report.path}: {report.episodes} episodes, {report.quarantined} malformed lines "
        f"(quarantined when ingested), {report.heartbeats} heartbeats skipped{span}"
    )


@app.command()
def run(
    job: str = typer.Argument(..., help="ingest | patrol | decay"),
    being: str | None = typer.Option(None, "--being", help="patrol only this being."),
    partition: str | None = typer.Option(
        None,
        "--partition",
        help="A day (YYYY-MM-DD), a range (START...END) for ingest, or a being for patrol.",
    ),
) -> None:
    """Execute a job through Dagster on the local instance (the run shows up in the UI)."""
    from mindflow.runner import run_job

    try:
        summaries = run_job(load_settings(), job, being=being, partition=partition)
    except MindflowError as exc:
        _fail(exc)
    if not summaries:
        typer.echo(f"{job}: nothing to do (no pending inbox file)")
    for s in summaries:
        typer.echo(f"{s.job} [{s.partition}] run {s.run_id}: {'ok' if s.success else 'FAILED'}")
        if s.changes:
            typer.echo(f"  {s.changes}")


@app.command()
def status() -> None:
    """Print episodes, nodes, clusters and decay statuses per being."""
    from mindflow import store
    from mindflow.status import being_statuses, render

    settings = load_settings()
    if not settings.duckdb_path.exists():
        typer.echo(
            f"no memory yet in {settings.resolved_home}: "
            "land a file with `mindflow ingest`, then `mindflow run ingest`"
        )
        return
    try:
        with store.connect(settings.duckdb_path, read_only=True) as con:
            statuses = being_statuses(con)
    except MindflowError as exc:
        _fail(exc)
    typer.echo(render(statuses))


@app.command()
def init() -> None:
    """Create MINDFLOW_HOME and the local Dagster instance configuration (pool `duckdb` limit 1)."""
    from mindflow.runner import prepare_instance

    settings = load_settings()
    for folder in (settings.inbox, settings.events, settings.workspace, settings.lance_path):
        folder.mkdir(parents=True, exist_ok=True)
    home = prepare_instance(settings)
    typer.echo(f"MINDFLOW_HOME={settings.resolved_home}\nDAGSTER_HOME={home}")


@app.command()
def demo(
    samples: Path = typer.Option(SAMPLES, help="Folder holding inbox/<being_id>/ sample files."),
) -> None:
    """Land the sample data, run ingest, patrol and decay through Dagster, and print what they made."""
    from mindflow import store
    from mindflow.inbox import land_file
    from mindflow.runner import run_job
    from mindflow.status import being_statuses, render

    settings = load_settings()
    try:
        inbox = samples / "inbox"
        if not inbox.is_dir():
            raise MindflowError(f"{inbox}: no sample inbox folder")
        for being_dir in sorted(p for p in inbox.iterdir() if p.is_dir()):
            for path in sorted(being_dir.iterdir()):
                if path.suffix in (".jsonl", ".md"):
                    report = land_file(settings.inbox, path, being_dir.name)
                    typer.echo(f"landed {being_dir.name}/{path.name}: {report.episodes} episodes")
        for job in ("ingest", "patrol", "decay"):
            for s in run_job(settings, job):
                typer.echo(f"{s.job} [{s.partition}] run {s.run_id}: {'ok' if s.success else 'FAILED'}")
                if s.changes:
                    typer.echo(f"  {s.changes}")
        with store.connect(settings.duckdb_path, read_only=True) as con:
            typer.echo("\n" + render(being_statuses(con)))
    except MindflowError as exc:
        _fail(exc)
    typer.echo(f"\nDagster runs are recorded in {settings.dagster_home}; browse them with `make dev`.")


@app.command()
def serve(
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; beyond loopback only with API tokens."
    ),
    port: int = typer.Option(8765, "--port", help="TCP port."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve the recall API (FastAPI under uvicorn) over LanceDB and the workspace; never opens DuckDB."""
    from mindflow.api.auth import check_bind, parse_tokens

    settings = load_settings()
    try:
        secret = settings.api_tokens.get_secret_value() if settings.api_tokens else None
        check_bind(host, parse_tokens(secret))
        from mindflow.embeddings import Embedder

        # Loaded here, so a bad model setting is one line of error instead of a failed startup.
        Embedder(model=settings.embedding_model).encode(["warm up"])
    except MindflowError as exc:
        _fail(exc)
    import uvicorn

    from mindflow.api import create_app

    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
