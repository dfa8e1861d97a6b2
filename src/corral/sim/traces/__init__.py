"""Readers that turn public GPU-cluster traces into simulator workloads.

``read_trace("FORMAT:PATH?key=value&...")``; the formats are openb, philly, gavel, pai2020
and helios (see each module for its columns and options).
"""

from corral.sim.traces.registry import FORMATS, TraceFormat, TraceSpec, parse_trace_spec, read_trace

__all__ = ["FORMATS", "TraceFormat", "TraceSpec", "parse_trace_spec", "read_trace"]
