"""Partitions shared by the assets: days of episodes and decay, and one partition per being."""

import dagster as dg

# Episodes are partitioned by the day they happened; imported conversations may be old.
FIRST_DAY = "2020-01-01"
daily = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, end_offset=1)
beings = dg.DynamicPartitionsDefinition(name="beings")
