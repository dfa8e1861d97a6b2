"""Serve the web dashboard's static assets at ``/ui/``.

The assets are plain files shipped in the package (``corral/server/dashboard``): no build
step and nothing fetched at run time. The page itself is public; every piece of data it
shows comes from ``/api/v1`` with the token the user typed (or that ``corral up`` put in
the URL fragment, which browsers never send to the server).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

UI_PREFIX = "/ui"
ASSETS = Path(__file__).with_name("dashboard")

# Same-origin scripts, styles and API calls only; no framing (clickjacking on the buttons).
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


class _Assets(StaticFiles):
    """Static files with the security headers above on every response."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def dashboard_url(base_url: str, token: str | None = None) -> str:
    """The dashboard's address; with ``token``, a login link carrying it in the fragment."""
    url = f"{base_url.rstrip('/')}{UI_PREFIX}/"
    return f"{url}#token={token}" if token else url


def mount_dashboard(app: FastAPI) -> None:
    """Serve the assets at ``/ui/``; ``/`` and ``/ui`` redirect there."""

    @app.get("/", include_in_schema=False)
    @app.get(UI_PREFIX, include_in_schema=False)
    def _to_dashboard() -> RedirectResponse:
        return RedirectResponse(f"{UI_PREFIX}/")

    app.mount(UI_PREFIX, _Assets(directory=ASSETS, html=True), name="dashboard")
