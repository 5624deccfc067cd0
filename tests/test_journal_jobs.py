"""The memory file index in Dagster: `mindflow run journal_reindex`, the asset's metadata, and the
sensor that reindexes a being's files when they change."""

from __future__ import annotations

import dagster as dg
from test_journal import write_files

from mindflow import store
from mindflow.models import utcnow
from mindflow.runner import run_job


def test_the_sensor_asks_for_a_run_only_when_a_beings_files_changed(settings):
    from sensors.journal import journal_files_sensor

    instance = dg.DagsterInstance.ephemeral()

    def tick():
        with dg.build_sensor_context(instance=instance) as context:
            return journal_files_sensor(context)

    assert "no being" in tick().skip_message
    instance.add_dynamic_partitions("beings", ["ada", "bram"])
    with store.connect(settings.duckdb_path):
        pass  # the file and its schema, as any first run makes them
    write_files(settings.workspace, "ada", utcnow().date())
    requests = tick()
    (request,) = requests if isinstance(requests, list) else requests.run_requests
    assert request.partition_key == "ada" and request.run_key.startswith("journal-ada-")

    # A being's first runs add it as a partition of the local instance: ingest does it.
    (settings.inbox / "ada").mkdir(parents=True)
    (settings.inbox / "ada" / "one.jsonl").write_text(
        '{"ts": "2026-04-01T09:00:00Z", "text": "Hello there."}\n'
    )
    run_job(settings, "ingest")
    (summary,) = run_job(settings, "journal_reindex", being="ada")
    assert summary.success, summary
    skipped = tick()
    assert isinstance(skipped, dg.SkipReason) and "unchanged" in skipped.skip_message

    diary = settings.workspace / "ada" / "diary" / f"{utcnow().date().isoformat()}.md"
    diary.write_text(diary.read_text() + "Later: we shipped it.\n")
    requests = tick()
    (again,) = requests if isinstance(requests, list) else requests.run_requests
    assert again.partition_key == "ada" and again.run_key != request.run_key


def test_the_asset_reports_what_it_indexed(settings):
    write_files(settings.workspace, "ada", utcnow().date())
    (settings.inbox / "ada").mkdir(parents=True)
    (settings.inbox / "ada" / "one.jsonl").write_text(
        '{"ts": "2026-04-01T09:00:00Z", "text": "Hello there."}\n'
    )
    run_job(settings, "ingest")
    (first,) = run_job(settings, "journal_reindex", being="ada")
    (second,) = run_job(settings, "journal_reindex", being="ada")
    assert first.success and second.success
    instance = dg.DagsterInstance.get()
    events = instance.fetch_materializations(dg.AssetKey("journal_chunks"), limit=10).records
    latest, earlier = (e.asset_materialization.metadata for e in events[:2])
    assert earlier["new"].value == 7 and earlier["chunks"].value >= 7 and earlier["embedded"].value > 0
    assert latest["unchanged"].value == 7 and latest["new"].value == 0 and latest["embedded"].value == 0
    assert "ada" in latest["per_being"].value
