"""Python SDK for Corral."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.client.client import Client

__all__ = ["Client"]


def __getattr__(name: str) -> Any:
    """``Client`` on first use, so that ``corral.client.config`` (which the CLI reads for
    every command) does not import httpx and the schemas with it."""
    if name == "Client":
        from corral.client.client import Client

        return Client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
