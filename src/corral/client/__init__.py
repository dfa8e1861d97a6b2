"""Python SDK for Corral."""

from corral.client.client import Client

__all__ = ["Client"]
