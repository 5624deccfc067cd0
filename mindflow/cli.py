"""The `mindflow` command: land files, run jobs, show what memory holds."""

from __future__ import annotations

import os
from datetime import date, datetime, time
from pathlib import Path

import typer

from mindflow.config import load_settings
from mindflow.errors import MindflowError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"


def _fail(exc: MindflowError) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code=1)


def _moment(option: str, text: str | None, *, until: bool = False) -> datetime | None:
    """A date or time option's value; parsed here rather than by typer, whose refusal is a usage
    box with exit code 2 instead of the one error line every other bad input gets. An upper
    bound (`until`) given as a date alone means through the end of that day."""
    if text is None:
        return None
    try:
        if until and len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time.max)
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise MindflowError(f"invalid {option} {text!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z]") from exc


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
        settings = load_settings()
        report = land_file(settings.inbox, path, being, format, max_chars=settings.max_episode_chars)
    except MindflowError as exc:
        _fail(exc)
    span = f", days {report.first_day} .. {report.last_day}" if report.first_day else ""
    if report.already:
        typer.echo(
            f"already landed: {report.path} holds the same content, waiting to be ingested; nothing copied"
        )
        return
    typer.echo(
        f"landed {report.path}: {report.episodes} episodes, {report.quarantined} malformed lines "
        f"(quarantined when ingested), {report.heartbeats} heartbeats skipped{span}"
    )


@app.command()
def run(
    job: str = typer.Argument(
        ...,
        help="ingest | extraction | patrol | form | decay | narrative | audit_digest | ebook_reindex "
        "| forget | journal_reindex | reflection | approvals",
    ),
    being: str | None = typer.Option(
        None,
        "--being",
        help="Only this being (extraction, patrol, form, narrative, journal_reindex, reflection).",
    ),
    partition: str | None = typer.Option(
        None,
        "--partition",
        help="A day (YYYY-MM-DD), a range (START...END) for ingest, a being or a range of beings "
        "(FIRST...LAST) for extraction, patrol, form, narrative, journal_reindex and reflection, "
        "a month (YYYY-MM) for audit_digest.",
    ),
) -> None:
    """Execute a job through Dagster on the local instance (the run shows up in the UI)."""
    from mindflow.runner import run_job

    try:
        summaries = run_job(load_settings(), job, being=being, partition=partition)
    except MindflowError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        # Episodes stay in the inbox; a run cut short is marked failed by the next one (its
        # process is gone), so nothing waits for it.
        typer.echo("interrupted: stopped waiting or running; nothing is lost, run it again", err=True)
        raise typer.Exit(code=130) from None
    if not summaries:
        if job != "ingest":  # only the jobs over the beings partitions can find nothing to run
            typer.echo(f"{job}: nothing to do (no being has ingested episodes yet)")
        elif partition:
            typer.echo(f"ingest: nothing to ingest for {partition} (no episodes in those days)")
        else:
            typer.echo("ingest: nothing to do (no pending inbox file)")
    for s in summaries:
        typer.echo(f"{s.job} [{s.partition}] run {s.run_id}: {'ok' if s.success else 'FAILED'}")
        if s.changes:
            typer.echo(f"  {s.changes}")


@app.command()
def forget(
    query: str | None = typer.Argument(None, help="What to forget, in plain words."),
    being: str = typer.Option(..., "--being", help="The being whose memory it is."),
    ref: list[str] = typer.Option([], "--ref", help="A memory or fact ref to forget (repeatable)."),
    permanent: bool = typer.Option(
        False, "--permanent", help="Delete everywhere, for good (the `forget` job), instead of archiving."
    ),
    yes: bool = typer.Option(False, "--yes", help="Forget every candidate without asking."),
) -> None:
    """Find what a forget would remove, show it, and forget it once confirmed (or with --yes).

    The proposal is opened only once answered, so a question nobody can answer (stdin
    closed) leaves nothing pending behind; "n" is a decision, recorded as rejected (exit 0)."""
    from mindflow.loop import forget as loop_forget

    if not query and not ref:
        _fail(MindflowError("say what to forget: a QUERY, one or more --ref, or both"))
    settings = load_settings()
    try:
        candidates = loop_forget.find_candidates(settings, being, query, ref)
    except MindflowError as exc:
        _fail(exc)
    if not candidates:
        typer.echo(f"nothing of {being} matches: nothing to forget")
        raise typer.Exit(code=1)
    typer.echo(f"{len(candidates)} candidates")
    for c in candidates:
        status = f" ({c.status})" if c.status else ""
        typer.echo(f"  {c.ref}  [{c.store}{status}]  {c.text[:100]}")
    what = "delete for good" if permanent else "forget (restorable)"
    agreed = True
    if not yes:
        try:
            agreed = typer.confirm(f"{what} all {len(candidates)}?", default=False)
        except typer.Abort:  # stdin closed (or Ctrl-C): no answer, so no decision
            typer.echo("")  # end the question's line
            _fail(
                MindflowError(
                    "no answer to confirm with (stdin closed or interrupted): nothing was forgotten "
                    "and no proposal was opened; answer on a terminal, pass --yes, or find and "
                    f"confirm through the API (POST /v1/beings/{being}/forget)"
                )
            )
    try:
        proposal = loop_forget.propose(settings, being, query, ref, created_by="user", candidates=candidates)
        assert proposal is not None  # it has candidates
        if not agreed:
            loop_forget.reject(settings, being, proposal.proposal_id)
            typer.echo(f"rejected: nothing changed (proposal {proposal.proposal_id})")
            return
        decided = loop_forget.confirm(settings, being, proposal.proposal_id, permanent=permanent)
    except MindflowError as exc:
        _fail(exc)
    forgotten = decided.proposal.payload["confirmed_refs"]
    typer.echo(f"forgotten: {len(forgotten)} refs, hidden from recall on every server now")
    if permanent:
        typer.echo(
            "the forget job deletes them everywhere within a minute (its sensor), or now: mindflow run forget"
        )


def _pin(being: str, ref: str, value: bool) -> None:
    from mindflow.loop import forget as loop_forget

    try:
        loop_forget.pin(load_settings(), being, ref, value)
    except MindflowError as exc:
        _fail(exc)
    typer.echo(f"{ref} {'pinned' if value else 'unpinned'}: shown so at once, folded in by the next run")


@app.command()
def pin(
    ref: str = typer.Argument(..., help="The memory ref."),
    being: str = typer.Option(..., "--being", help="The being whose memory it is."),
) -> None:
    """Pin a memory: it never decays and always has a place in MEMORY.md's Critical Facts."""
    _pin(being, ref, True)


@app.command()
def unpin(
    ref: str = typer.Argument(..., help="The memory ref."),
    being: str = typer.Option(..., "--being", help="The being whose memory it is."),
) -> None:
    """Unpin a memory: it decays like any other from the next run on."""
    _pin(being, ref, False)


@app.command()
def restore(
    ref: str = typer.Argument(..., help="The ref of a memory or fact forgotten softly."),
    being: str = typer.Option(..., "--being", help="The being whose memory it is."),
) -> None:
    """Undo a soft forget."""
    from mindflow.loop import forget as loop_forget

    try:
        loop_forget.restore(load_settings(), being, ref)
    except MindflowError as exc:
        _fail(exc)
    typer.echo(f"{ref} restored")


@app.command()
def status() -> None:
    """Print episodes, nodes, clusters and decay statuses per being."""
    from mindflow import store
    from mindflow.status import being_statuses, render

    settings = load_settings()
    statuses = None
    if settings.duckdb_path.exists():  # `mindflow init` may have created it empty
        try:
            with store.connect(settings.duckdb_path, read_only=True) as con:
                statuses = being_statuses(con)
        except MindflowError as exc:
            _fail(exc)
    if statuses:
        typer.echo(render(statuses))
    else:
        typer.echo(
            f"no memory yet in {settings.resolved_home}: "
            "land a file with `mindflow ingest`, then `mindflow run ingest`"
        )
    from mindflow.status import integrity_lines

    alerts = integrity_lines(settings)
    if alerts:  # quiet when every critical file matches its checksum
        typer.echo("\n" + alerts)
    from mindflow.status import proposal_lines

    waiting = proposal_lines(settings)
    if waiting:
        typer.echo("\nProposals:\n" + waiting)
    from mindflow import failures

    failed = failures.lines(settings)  # runs/failures.jsonl: read without DuckDB or Dagster
    if failed:
        typer.echo("\n" + failed)
    from mindflow.status import dead_run_lines

    killed = dead_run_lines(settings)  # not yet in failures.jsonl: nothing has reaped them
    if killed:
        typer.echo("\n" + killed)


@app.command()
def review(
    being: str | None = typer.Option(None, "--being", help="The being whose proposals to review."),
    approve: str | None = typer.Option(None, "--approve", help="Items to approve: 1,3 or 2-4 or all."),
    reject: str | None = typer.Option(None, "--reject", help="Items to reject: 2 or 2,5."),
    defer: str | None = typer.Option(None, "--defer", help="Items to decide later: 5."),
    edit: list[str] = typer.Option(
        [], "--edit", help="Approve an item with a change: --edit '4=new text' or --edit '2=target=<ref>'."
    ),
    all_: bool = typer.Option(False, "--all", help="Approve every pending item (approve all)."),
    answer: str | None = typer.Option(
        None, "--answer", help='The seed\'s answer as typed: "approve 1,3; reject 2; edit 4 \\"text\\"".'
    ),
    apply: bool = typer.Option(True, "--apply/--no-apply", help="Carry out the approved items at once."),
) -> None:
    """List the proposals waiting for a decision and take decisions: approve all, approve with changes,
    reject, or item by item. Without decision flags on a terminal, asks for an answer."""
    import sys

    from mindflow.loop.proposals import ProposalStore
    from mindflow.reflection import answers
    from mindflow.reflection.decide import decide_many
    from mindflow.reflection.items import pending_items
    from mindflow.reflection.notes import item_lines

    settings = load_settings()
    store = ProposalStore(settings.proposals)
    try:
        beings = [being] if being else [b for b in store.beings() if pending_items(store, b)]
        given = any([approve, reject, defer, edit, all_, answer])
        if given and len(beings) > 1:
            raise MindflowError(
                f"several beings have proposals ({', '.join(beings)}): choose one with --being"
            )
        if not beings or not any(pending_items(store, b) for b in beings):
            typer.echo("nothing waits for a decision")
            return
        for name in beings:
            items = pending_items(store, name)
            typer.echo(f"{name}: {len(items)} proposal(s) waiting")
            for item in items:
                typer.echo("\n".join(item_lines(item, markdown=False)))
            if given:
                decided = answers.Answer()
                for verb, spec in (("approve", approve), ("reject", reject), ("defer", defer)):
                    if spec:
                        decided.merge(answers.parse(f"{verb} {spec}", items))
                if all_:
                    decided.merge(answers.parse("approve all", items))
                for change in edit:
                    number, sep, text = change.partition("=")
                    if not sep:
                        raise MindflowError(f"--edit {change!r}: write N=new text or N=target=<ref>")
                    decided.merge(answers.edit(number, text, items))
                if answer:
                    decided.merge(answers.parse(answer, items))
            elif sys.stdin.isatty():
                typed = typer.prompt(
                    '\nanswer (approve all | approve 1,3 | reject 2 | defer 5 | edit 4 "text"; '
                    "empty: decide later)",
                    default="",
                    show_default=False,
                )
                if not typed.strip():
                    continue
                decided = answers.parse(typed, items)
            else:
                continue
            if not decided.decisions:
                continue
            report = decide_many(settings, name, decided.decisions, decided_by="cli", edits=decided.edits)
            typer.echo(
                f"{name}: approved {report.count('approved')}, rejected {report.count('rejected')}, "
                f"deferred {report.count('deferred')} (approval: {report.approval})"
            )
    except MindflowError as exc:
        _fail(exc)
    from mindflow.reflection.approvals import waiting_beings

    if apply and waiting_beings(settings):
        from mindflow.runner import run_job

        for s in run_job(settings, "approvals"):
            typer.echo(f"{s.job} run {s.run_id}: {'ok' if s.success else 'FAILED'}")
            if s.changes:
                typer.echo(f"  {s.changes}")


procedures_app = typer.Typer(no_args_is_help=True, help="The procedural store: how a being does things.")
app.add_typer(procedures_app, name="procedures")


@procedures_app.command("add")
def procedures_add(
    being: str = typer.Option(..., "--being", help="The being the procedure belongs to."),
    name: str = typer.Option(..., "--name", help="The procedure's name (a new version if it exists)."),
    trigger: str = typer.Option(..., "--trigger", help="When it applies."),
    step: list[str] = typer.Option(..., "--step", help="One step (repeat, in order)."),
    notes: str | None = typer.Option(None, "--notes", help="Anything worth knowing."),
    confidence: float = typer.Option(0.9, "--confidence", help="0..1."),
) -> None:
    """Add a procedure (or its next version): recorded as an approved proposal and applied at once."""
    from mindflow.reflection.procedures import propose_procedure
    from mindflow.runner import run_job

    settings = load_settings()
    try:
        proposal = propose_procedure(
            settings, being,
            {"name": name, "trigger": trigger, "steps": step, "notes": notes, "confidence": confidence},
            created_by="cli", approved=True,
        )  # fmt: skip
        summaries = run_job(settings, "approvals")
    except MindflowError as exc:
        _fail(exc)
    typer.echo(f"proposal {proposal.proposal_id}: procedure {name!r} approved")
    for s in summaries:
        typer.echo(f"{s.job} run {s.run_id}: {'ok' if s.success else 'FAILED'}")
        if s.changes:
            typer.echo(f"  {s.changes}")


@procedures_app.command("list")
def procedures_list(
    being: str = typer.Option(..., "--being", help="The being whose procedures to list."),
    name: str | None = typer.Option(None, "--name", help="Every version of this procedure."),
) -> None:
    """The being's current procedures, or every version of one (from DuckDB, read-only)."""
    from mindflow import store
    from mindflow.reflection import procedures

    settings = load_settings()
    if not settings.duckdb_path.exists():
        typer.echo("no procedures yet")
        return
    try:
        with store.connect(settings.duckdb_path, read_only=True) as con:
            rows = procedures.versions(con, being, name) if name else procedures.current(con, being)
    except MindflowError as exc:
        _fail(exc)
    if not rows:
        typer.echo("no procedures yet" if not name else f"no procedure {name!r} for {being}")
    for row in rows:
        closed = f", superseded {row['superseded_at']:%Y-%m-%d}" if row.get("superseded_at") else ""
        title = row.get("name", name)
        typer.echo(f"{title} v{row['version']}{closed} — when {row['trigger']}")
        for i, step in enumerate(row["steps"], 1):
            typer.echo(f"   {i}. {step}")


@app.command()
def init() -> None:
    """Create MINDFLOW_HOME, the local Dagster instance (pool `duckdb` limit 1) and the DuckDB schema."""
    from mindflow.runner import init_home

    settings = load_settings()
    home = init_home(settings)
    typer.echo(f"MINDFLOW_HOME={settings.resolved_home}\nDAGSTER_HOME={home}")


@app.command()
def demo(
    samples: Path = typer.Option(SAMPLES, help="Folder holding inbox/<being_id>/ sample files."),
) -> None:
    """Land the sample data and personas, run ingest, patrol, decay and narrative, print what they made."""
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
                    report = land_file(
                        settings.inbox, path, being_dir.name, max_chars=settings.max_episode_chars
                    )
                    landed = "already landed" if report.already else "landed"
                    typer.echo(f"{landed} {being_dir.name}/{path.name}: {report.episodes} episodes")
        from mindflow.narrative import place_personas, workspace_summary

        with store.connect(settings.duckdb_path) as con:  # the CREATE rows reach audit_log too
            placed_files = place_personas(settings, samples / "workspace", con=con)
        for placed in placed_files:
            typer.echo(f"placed {placed} in {settings.workspace}")
        for job in ("ingest", "patrol", "decay", "narrative"):
            for s in run_job(settings, job):
                typer.echo(f"{s.job} [{s.partition}] run {s.run_id}: {'ok' if s.success else 'FAILED'}")
                if s.changes:
                    typer.echo(f"  {s.changes}")
        with store.connect(settings.duckdb_path, read_only=True) as con:
            typer.echo("\n" + render(being_statuses(con)))
        typer.echo("\n" + workspace_summary(settings))
    except MindflowError as exc:
        _fail(exc)
    typer.echo(f"\nDagster runs are recorded in {settings.dagster_home}; browse them with `make dev`.")


@app.command()
def rollback(
    file: str = typer.Argument(..., help="A workspace file, e.g. ada/STORY.md or ada/SOUL.md."),
    to: str = typer.Option(..., "--to", help="A commit (sha or prefix) or a date YYYY-MM-DD[THH:MM] (UTC)."),
) -> None:
    """Restore a workspace file to an earlier version; the restore is committed and logged as REVERT."""
    from mindflow import audit, store

    settings = load_settings()
    try:
        with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
            sha, changed = audit.rollback(settings, file, to, con=con)
        if changed:
            from mindflow.materializations import report_rollback

            report_rollback(settings, file, sha)  # STORY.md and MEMORY.md are assets' outputs
    except MindflowError as exc:
        _fail(exc)
    if changed:
        typer.echo(f"restored {file} to {sha[:10]}; logged as REVERT")
    else:
        typer.echo(f"{file} already matches {sha[:10]}: nothing to restore")


@app.command(name="audit")
def audit_cmd(
    since: str | None = typer.Option(None, "--since", help="Only entries since this date (YYYY-MM-DD)."),
    file: str | None = typer.Option(None, "--file", help="Only this file (ada/STORY.md; STORY.md: all)."),
    actor: str | None = typer.Option(None, "--actor", help="Only this actor (narrative, patrol, user ...)."),
    action: str | None = typer.Option(None, "--action", help="Only this action (EDIT, REVERT, ALERT ...)."),
    limit: int = typer.Option(50, "--limit", help="Show at most the newest N entries (0: all)."),
    accept: str | None = typer.Option(
        None, "--accept", help="Accept a critical file's current content (after an ALERT) as intended."
    ),
) -> None:
    """Show the audit trail (the DuckDB audit_log table): who changed what, when, on whose approval."""
    from mindflow import audit, store

    settings = load_settings()
    try:
        if accept:
            with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
                audit.accept_critical(settings, accept, con=con)
            typer.echo(f"accepted the current {accept} as intended; logged as EDIT")
            return
        when = _moment("--since", since.rstrip("Z") if since else None)
        if limit < 0:
            raise MindflowError(f"invalid --limit {limit}: give how many of the newest entries (0: all)")
        if action and action.upper() not in audit.ACTIONS:
            raise MindflowError(f"unknown action {action!r}; use one of: {', '.join(audit.ACTIONS)}")
        rows = []
        # The table, not meta/audit.log: a workspace edit cannot change it. Opened as the other
        # commands do, waiting for a job that holds the file (up to MINDFLOW_DUCKDB_LOCK_TIMEOUT_S).
        if settings.duckdb_path.exists():
            with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
                rows = audit.query(settings, since=when, file=file, actor=actor, action=action, con=con)
    except MindflowError as exc:
        _fail(exc)
    if waiting := audit.pending(settings):
        typer.echo(
            f"({waiting} changes of an interrupted or unfinished run are not in the table "
            "yet; the next run records them)",
            err=True,
        )
    if not rows:
        typer.echo("no audit entries match")
        return
    shown = rows[-limit:] if limit else rows
    if len(shown) < len(rows):
        typer.echo(f"({len(rows) - len(shown)} older entries not shown; --limit 0 shows all)")
    for r in shown:
        typer.echo(r.line())


def _warm_up() -> None:
    """Load the embedding model and export its ONNX graph if it is not there yet."""
    from mindflow.embeddings import Embedder

    Embedder.for_settings(load_settings()).encode_query("warm up")


@app.command()
def serve(
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; beyond loopback only with API tokens."
    ),
    port: int = typer.Option(8765, "--port", help="TCP port."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Worker processes (default MINDFLOW_API_WORKERS, else 1); several share the port "
        "and map the same hot index files.",
    ),
    rankers: int | None = typer.Option(
        None,
        "--rankers",
        min=0,
        help="Ranking processes the worker hands its hot-index recalls to, the next free one "
        "taking the next recall (default MINDFLOW_API_RANKERS, else one per CPU with one worker "
        "on two or more CPUs; 0: the worker ranks them).",
    ),
) -> None:
    """Serve the recall API (FastAPI under uvicorn) over LanceDB and the workspace; never opens DuckDB."""
    from mindflow.api.auth import check_bind, parse_tokens

    if workers is not None:
        # In the environment, so the workers uvicorn spawns read the same number.
        os.environ["MINDFLOW_API_WORKERS"] = str(workers)
    if rankers is not None:
        os.environ["MINDFLOW_API_RANKERS"] = str(rankers)
    settings = load_settings()
    if settings.api_rankers is None:
        # In the environment too, so the worker reads the number chosen here.
        from mindflow.api.rankers import default_processes

        os.environ["MINDFLOW_API_RANKERS"] = str(default_processes(settings.api_workers))
        settings = load_settings()
    try:
        secret = settings.api_tokens.get_secret_value() if settings.api_tokens else None
        check_bind(host, parse_tokens(secret))
        # Loaded here, so a bad model setting is one line of error instead of a failed startup
        # (and the query encoder's ONNX graph exported before the server binds). With several
        # workers, in a process of its own: the supervisor that stays keeps no model.
        if settings.api_workers > 1:
            from mindflow import spawned

            spawned.call(_warm_up)
        else:
            _warm_up()
    except MindflowError as exc:
        _fail(exc)
    import uvicorn
    from threadpoolctl import threadpool_limits

    if settings.api_workers > 1:
        # Recall is Python between its library calls: one process keeps one core busy at
        # most, whatever its threads. uvicorn's workers share the listening socket.
        uvicorn.run(
            "mindflow.api.worker:create_worker_app",
            factory=True,
            host=host,
            port=port,
            log_level=log_level,
            workers=settings.api_workers,
        )
        return
    # One BLAS thread: a recall's vector search runs beside its full-text search, and a
    # second BLAS thread spinning on the other core slows both.
    threadpool_limits(1, user_api="blas")

    from mindflow.api import create_app

    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)


@app.command()
def mcp(
    being: str | None = typer.Option(
        None, "--being", help="Serve this being only: its tools then need no `being` argument."
    ),
) -> None:
    """Serve the MCP tools over stdio (for an MCP client that starts `mindflow mcp` itself).

    The recall API runs inside this process over MINDFLOW_HOME's LanceDB and workspace, without
    tokens: the process already has the files. `mindflow serve` offers the same tools over
    HTTP at /mcp, with tokens."""
    import anyio

    from mindflow.api import create_app
    from mindflow.api.mcp_server import serve_stdio
    from mindflow.inbox import validate_being_id

    settings = load_settings()
    try:
        if being is not None:
            validate_being_id(being)
    except MindflowError as exc:
        _fail(exc)
    anyio.run(serve_stdio, create_app(settings, tokens={}, mcp=False), being)


ebooks_app = typer.Typer(no_args_is_help=True, help="The ebook index: reindex the ebook folder, search it.")
app.add_typer(ebooks_app, name="ebooks")


@ebooks_app.command("reindex")
def ebooks_reindex(
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Index new and changed documents of the ebook folder, drop removed ones (unchanged ones skipped).

    On a terminal a progress bar on stderr; when stderr is a file or pipe, one line per document.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mindflow import rag

    settings = load_settings()
    console = Console(stderr=True)  # its own console: the terminal check is made for this run
    lines = progress and not console.is_interactive
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not progress or lines,
    )
    task = bar.add_task("scanning", total=None)
    current = {"doc": ""}

    def advance(done: int, total: int, doc_id: str) -> None:
        current["doc"] = doc_id
        if lines:
            if doc_id:
                typer.echo(f"[{done + 1}/{total}] indexing {doc_id}", err=True)
            return
        # Redrawn at once: a document can take seconds or minutes, the bar names the current one.
        bar.update(
            task, completed=done, total=total, description=doc_id or "optimizing the index", refresh=True
        )

    def embedding(done: int, total: int) -> None:
        # A long book takes minutes to embed: show its chunks too.
        if lines:
            typer.echo(f"  {current['doc']}: embedded {done}/{total} chunks", err=True)
        else:
            bar.update(task, description=f"{current['doc']}: embedded {done}/{total} chunks", refresh=True)

    from mindflow.embeddings import Embedder

    embedder = Embedder.for_settings(settings, progress=embedding, progress_every=256)
    try:
        with bar:
            report = rag.reindex(settings, embedder=embedder, progress=advance)
        from mindflow.materializations import report_ebook_reindex

        report_ebook_reindex(settings, report)  # so the UI shows `ebook_chunks` as this reindex left it
    except MindflowError as exc:
        _fail(exc)
    typer.echo(
        f"{settings.ebooks}: {report.documents} documents, {report.chunks} chunks; "
        f"new={len(report.new)} changed={len(report.changed)} removed={len(report.removed)} "
        f"unchanged={report.unchanged} failed={len(report.failed)}; "
        f"{report.embedded} chunks embedded, {report.cached} from the cache, {report.seconds:.1f} s"
    )
    for doc_id, reason in sorted(report.failed.items()):
        typer.echo(f"  failed {doc_id}: {reason}")


@ebooks_app.command("search")
def ebooks_search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    k: int = typer.Option(5, "-k", "--k", help="How many passages, 1 to 50."),
    full: bool = typer.Option(False, "--full", help="Print whole chunks instead of 300 characters."),
) -> None:
    """Hybrid (vector + full-text) search of the ebook index."""
    from mindflow import rag

    settings = load_settings()
    try:
        if not 1 <= k <= 50:
            raise MindflowError(f"invalid -k {k}: give how many passages, 1 to 50")
        hits = rag.search(query, k, settings=settings)
    except MindflowError as exc:
        _fail(exc)
    if not hits:
        typer.echo("no passage found (is the folder indexed? run `mindflow ebooks reindex`)")
    for i, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())
        if not full and len(text) > 300:
            text = text[:297] + "..."
        chapter = f" / {hit.chapter}" if hit.chapter else ""
        typer.echo(f"{i}. {hit.title}{chapter}  [{hit.doc_id} #{hit.ordinal}, score {hit.score:.4f}]")
        typer.echo(f"   {text}")


memories_app = typer.Typer(
    no_args_is_help=True,
    help="A being's memories as LanceDB holds them (no server needed): show one, list them, its history.",
)
app.add_typer(memories_app, name="memories")


def _memory_reader(being: str):
    """(memories table, history table, mark state) of the local MINDFLOW_HOME; MindflowError for a
    being it knows nothing of, which would otherwise read as one without memories."""
    from mindflow import inbox, lance, memories, memory_history, records
    from mindflow.loop.marks import MarkCache

    settings = load_settings()
    db = lance.connect(settings.lance_path)
    table = lance.open_table(db, memories.TABLE)
    if not inbox.has_folder(settings.inbox, being) and not records.has_memories(table, being):
        raise MindflowError(
            f"unknown being {being!r}: it has no memories, no episodes and no inbox folder "
            "(land its episodes with `mindflow ingest`)"
        )
    state = MarkCache(settings.loop).state(being)
    return settings, table, lance.open_table(db, memory_history.TABLE), state


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"


def _echo_json(model) -> None:
    typer.echo(model.model_dump_json(indent=2))


@memories_app.command("show")
def memories_show(
    ref: str = typer.Argument(..., help="The memory ref (n-...)."),
    being: str = typer.Option(..., "--being", help="The being the memory belongs to."),
    as_json: bool = typer.Option(False, "--json", help="Print the record as JSON (as the API answers)."),
) -> None:
    """One memory: status, decay, pin, cluster, scene, feeling, sources and times."""
    import dataclasses

    from mindflow import records
    from mindflow.api.models import MemoryRecord
    from mindflow.scenes import scene_to_text

    try:
        _, table, _, state = _memory_reader(being)
        found = records.get_memory(table, being, ref, state)
    except MindflowError as exc:
        _fail(exc)
    if as_json:
        _echo_json(MemoryRecord.model_validate(dataclasses.asdict(found)))
        return
    scene = found.scene
    score = "-" if found.decay_score is None else f"{found.decay_score:.1f}"
    when = "; ".join((w["date"] or "?") + (f" {w['action']}" if w.get("action") else "") for w in scene.when)
    shown = scene_to_text(scene.when, scene.setting, scene.action, scene.dialogue, found.feeling)
    lines = [
        f"{found.memory_ref}  [{found.status}{', pinned' if found.pinned else ''}]  {found.being_id}",
        f"  scene:     {shown or '-'}",
        f"  text:      {found.text}",
        f"  feeling:   {found.feeling or '-'}",
        f"  kind:      {found.kind}   importance {found.importance:.2f}   trigger {found.trigger or '-'}",
        f"  decay:     {found.decay_status or '-'} (score {score})",
        f"  cluster:   {found.cluster_id or '-'}",
        f"  actors:    {', '.join(scene.actors) or '-'}",
        f"  when:      {when or '-'}",
        f"  setting:   {scene.setting or '-'}",
        f"  dialogue:  {' / '.join(scene.dialogue) or '-'}",
        f"  sensory:   {' / '.join(scene.sensory) or '-'}",
        f"  sources:   {', '.join(found.source_episode_ids) or '-'}",
        f"  happened:  {_when(found.ts)}   formed: {_when(found.created_at)}   "
        f"last recalled: {_when(found.last_activated)} ({found.reactivation_count} reactivations)",
    ]
    typer.echo("\n".join(lines))


@memories_app.command("list")
def memories_list(
    being: str = typer.Option(..., "--being", help="The being whose memories to list."),
    status: list[str] = typer.Option(
        [], "--status", help="Only this status (repeatable): active, dying, dormant, dead, archived."
    ),
    cluster: str | None = typer.Option(None, "--cluster", help="Only this cluster id."),
    since: str | None = typer.Option(
        None, "--since", help="Happened at or after: YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)."
    ),
    until: str | None = typer.Option(
        None, "--until", help="Happened at or before: YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="At most this many, 1 or more (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON record per line."),
) -> None:
    """The being's memories, oldest first (when they happened), with status and text."""
    import dataclasses
    from itertools import islice

    from mindflow import records
    from mindflow.api.models import MemoryRecord

    try:
        since_at, until_at = _moment("--since", since), _moment("--until", until, until=True)
        if limit is not None and limit < 1:
            raise MindflowError(f"invalid --limit {limit}: give how many memories, 1 or more (default: all)")
        _, table, _, state = _memory_reader(being)
        found = records.iter_memories(
            table, being, state, page_size=records.MAX_PAGE,
            status=status or None, cluster_id=cluster, since=since_at, until=until_at,
        )  # fmt: skip
        shown = 0
        for memory in islice(found, limit):
            shown += 1
            if as_json:
                typer.echo(MemoryRecord.model_validate(dataclasses.asdict(memory)).model_dump_json())
                continue
            text = " ".join(memory.text.split())
            text = text if len(text) <= 80 else text[:77] + "..."
            pin = " pinned" if memory.pinned else ""
            typer.echo(f"{memory.memory_ref}  {_when(memory.ts)}  {memory.status:<8}{pin}  {text}")
    except MindflowError as exc:
        _fail(exc)
    if not as_json:
        typer.echo(f"{shown} memories", err=True)


@memories_app.command("history")
def memories_history(
    ref: str = typer.Argument(..., help="The memory ref (n-...)."),
    being: str = typer.Option(..., "--being", help="The being the memory belongs to."),
    as_json: bool = typer.Option(False, "--json", help="Print the history as JSON (as the API answers)."),
) -> None:
    """Every change of the memory, oldest first: time, operation, actor, run id, before -> after."""
    import dataclasses
    import json

    from mindflow import records
    from mindflow.api.models import MemoryHistory
    from mindflow.loop.marks import read_marks, unfolded

    try:
        settings, table, history_table, state = _memory_reader(being)
        marks = read_marks(settings.loop, being)
        pending = unfolded(settings.loop, being, marks)
        found = records.get_history(history_table, table, being, ref, state, marks, pending)
    except MindflowError as exc:
        _fail(exc)
    if as_json:
        _echo_json(MemoryHistory.model_validate(dataclasses.asdict(found)))
        return
    typer.echo(f"{found.memory_ref} of {found.being_id}" + (" (deleted for good)" if found.deleted else ""))
    for entry in found.entries:
        change = " -> ".join(
            json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in (entry.before, entry.after) if v
        )
        run = f" run {entry.run_id}" if entry.run_id else (" (pending)" if entry.pending else "")
        typer.echo(f"  {_when(entry.ts)}  {entry.operation:<12} {entry.actor:<10}{run}  {change}")


def _parameter_error(exc: typer.BadParameter) -> str:
    """`missing argument PATH`, `missing option --being`, or typer's message on a value it cannot read."""
    param = exc.param
    if param is None:
        return exc.format_message()
    name = param.opts[0] if getattr(param, "opts", None) and param.param_type_name == "option" else None
    name = name or (param.name or "").upper()
    if type(exc).__name__ == "MissingParameter":
        return f"missing {param.param_type_name} {name}"
    return f"invalid {name}: {exc.message}"


def main() -> None:
    from pydantic import ValidationError

    try:
        # Not standalone: typer's own handling answers a missing argument with a usage box (exit 2).
        code = app(standalone_mode=False)
    except typer.BadParameter as exc:
        # A missing argument or option, or a value typer cannot read: one error line naming it
        # and exit 1, as every other bad input gets (_fail).
        where = exc.ctx.command_path if exc.ctx else "mindflow"
        typer.echo(f"error: {_parameter_error(exc)}; see `{where} --help`", err=True)
        raise SystemExit(1) from None
    except typer.TyperException as exc:
        # Anything else typer refuses (an unknown option or command): shown as typer shows it.
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        typer.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except ValidationError as exc:
        # A bad MINDFLOW_* setting: one line per problem, naming the setting, no traceback.
        for error in exc.errors():
            where = "_".join(str(p) for p in error["loc"]).upper()
            name = f"MINDFLOW_{where}" if where else "settings"
            typer.echo(f"error: {name}: {error['msg']}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
