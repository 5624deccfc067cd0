"""Materializations of assets that a CLI command changed outside a Dagster run, reported to the instance.

With mindflow/runner.py, a library module that knows Dagster. `mindflow ebooks reindex`
rewrites `ebook_chunks` and `mindflow rollback` restores a being's STORY.md or MEMORY.md
without a run; without a report the UI shows the asset "Never materialized" or older than it
is. Commands whose change a later run folds in (forget, pin, restore: marks read at recall
time) or that run a job themselves (review, procedures add) report nothing here.
"""

from __future__ import annotations

from mindflow.config import Settings

# A workspace file that is an asset's output, by its name under `<being>/`.
_WORKSPACE_ASSETS = {"STORY.md": ("story", "mode"), "MEMORY.md": ("core_memory", "modes")}


def report(
    settings: Settings, asset: str, metadata: dict, *, partition: str | None = None, description: str = ""
) -> None:
    """Record a materialization of `asset` in the home's Dagster instance, without a run."""
    import warnings

    import dagster as dg

    from mindflow import runner

    runner.prepare_instance(settings)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    runner.local_instance().report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=asset, partition=partition, description=description, metadata=metadata
        )
    )


def ebook_chunks_metadata(report, folder) -> dict:
    """The metadata of `ebook_chunks` from a `ReindexReport`: the asset's and `mindflow ebooks reindex`'s."""
    import dagster as dg

    failures = "\n".join(
        f"| {doc} | {reason.replace('|', '/')} |" for doc, reason in sorted(report.failed.items())
    )
    per_document = "\n".join(f"| {doc} | {n} |" for doc, n in sorted(report.chunks_by_document.items()))
    return {
        "dagster/row_count": report.chunks,
        "documents": report.documents,
        "chunks": report.chunks,
        "new": len(report.new),
        "changed": len(report.changed),
        "removed": len(report.removed),
        "unchanged": report.unchanged,
        "failed": len(report.failed),
        "embedded": report.embedded,
        "embedding_cache_hits": report.cached,
        "seconds": round(report.seconds, 3),
        "vector_index": report.vector_index,
        "table_version": report.version if report.version is not None else -1,
        "folder": str(folder),
        "failures": dg.MetadataValue.md(
            "| document | reason |\n|---|---|\n" + failures if failures else "none"
        ),
        "chunks_per_document": dg.MetadataValue.md(
            "| document | chunks |\n|---|---|\n" + per_document if per_document else "no documents"
        ),
    }


def report_ebook_reindex(settings: Settings, reindex_report) -> None:
    """`mindflow ebooks reindex` rewrote `ebook_chunks`."""
    report(
        settings,
        "ebook_chunks",
        ebook_chunks_metadata(reindex_report, settings.ebooks),
        description="mindflow ebooks reindex (outside a run)",
    )


def report_rollback(settings: Settings, relpath: str, sha: str) -> str | None:
    """`mindflow rollback` restored `<being>/STORY.md` or `<being>/MEMORY.md`: the asset changed, if any."""
    being, _, name = relpath.strip("/").partition("/")
    if name not in _WORKSPACE_ASSETS:
        return None  # personas, the diary and other files no asset writes whole
    asset, mode_key = _WORKSPACE_ASSETS[name]
    report(
        settings,
        asset,
        {mode_key: "rollback", "file": relpath, "restored_from": sha},
        partition=being,
        description=f"mindflow rollback {relpath} --to {sha[:10]} (outside a run)",
    )
    return asset
