"""Sensors that start jobs when something arrives."""
