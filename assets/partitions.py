"""Partitions shared by the assets: the days that hold episodes, and one partition per being.

`episodes` is partitioned by `days`, the days on which some being has episodes, added by
ingestion (the inbox sensor and `mindflow run ingest`) before the run that stores them.
A day nobody spoke on is no partition, so the partitions page never shows it as missing,
and each day's materialization carries that day's own row count. Imported conversations may
be years old: their days are added when they land, so they follow the newer days in
Dagster's order (the order partitions were added).
"""

import dagster as dg

days = dg.DynamicPartitionsDefinition(name="days")
beings = dg.DynamicPartitionsDefinition(name="beings")
