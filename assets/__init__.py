"""Dagster assets, one module per store."""
