"""Corral: a workload manager for GPU and TPU clusters."""

__version__ = "0.1.0"
