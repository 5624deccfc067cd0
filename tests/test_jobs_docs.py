"""The README's table of jobs against the Dagster definitions it describes.

A data engineer reads the table to know what a job materializes and what starts it: a job
missing from it, an asset it forgets, or a schedule or sensor that does not exist or starts
another job would each be found out in the UI the hard way.
"""

from __future__ import annotations

import re

import pytest
from readme import between, table, text


@pytest.fixture(scope="module")
def defs():
    import definitions

    return definitions.defs


def _rows() -> dict[str, tuple[str, str]]:
    """job -> (its assets cell, its trigger cell)."""
    rows = {}
    for line in table("| job | assets | trigger | partitions |"):
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        job = re.fullmatch(r"`([a-z_]+)`", cells[0])
        assert job, f"a row of the jobs table names no job: {line[:80]!r}"
        rows[job.group(1)] = (cells[1], cells[2])
    return rows


def _jobs(defs) -> dict[str, set[str]]:
    return {
        job.name: {key.to_user_string() for key in job.asset_layer.executable_asset_keys}
        for job in defs.resolve_all_job_defs()
        if not job.name.startswith("__")
    }


def test_every_job_has_a_row_with_its_assets(defs):
    rows, jobs = _rows(), _jobs(defs)
    assert sorted(rows) == sorted(jobs)
    assets = {key.to_user_string() for key in defs.resolve_all_asset_keys()}
    wrong = []
    for name, (cell, _) in rows.items():
        # The cell may quote a config beside the assets (`steps: form`): only asset keys count.
        named = set(re.findall(r"`([a-z_]+)`", cell)) & assets
        if named != jobs[name]:
            wrong.append(f"{name}: README {sorted(named)}, job {sorted(jobs[name])}")
    assert wrong == []


def test_every_trigger_a_row_names_exists_and_starts_that_job(defs):
    schedules = {s.name: defs.resolve_schedule_def(s.name).job_name for s in defs.schedules}
    sensors = {s.name: {t.job_name for t in defs.resolve_sensor_def(s.name).targets} for s in defs.sensors}
    wrong = []
    for job, (_, cell) in _rows().items():
        for kind, name in re.findall(r"\b(schedule|sensor) `([a-z_]+)`", cell):
            known = schedules if kind == "schedule" else sensors
            if name not in known:
                wrong.append(f"{job}: no {kind} {name}")
            elif job not in ({known[name]} if kind == "schedule" else known[name]):
                wrong.append(f"{job}: {kind} {name} starts {known[name]}")
    assert wrong == []


def test_every_schedule_sensor_and_asset_group_is_in_the_readme(defs):
    whole = text()
    names = [s.name for s in defs.schedules] + [s.name for s in defs.sensors]
    assert sorted(n for n in names if f"`{n}`" not in whole) == []
    sentence = between("Assets are grouped", ".")
    groups = {spec.group_name for spec in defs.resolve_all_asset_specs()}
    assert set(re.findall(r"`([a-z_]+)`", sentence)) == groups
