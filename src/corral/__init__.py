"""Corral: a workload manager for GPU and TPU clusters."""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it
