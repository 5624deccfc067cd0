"""mindflow: long-term memory for AI agents, run as Dagster pipelines."""

__version__ = "0.1.0"
