"""Pipelines: a graph of steps (data preparation, training, alignment, export) run as jobs with dependencies."""
