"""Limits of the API that the CLI states in its options: plain numbers, no pydantic, so
that building the ``corral`` command imports no schema (issue 21: a CLI that starts fast)."""

from __future__ import annotations

MAX_JOB_PAGE = 100_000  # the most jobs one page of ``GET /jobs`` holds
