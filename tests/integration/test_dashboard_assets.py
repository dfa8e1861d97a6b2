"""The dashboard's static assets: served at /ui/ from the package, with a strict policy."""

from __future__ import annotations

import re

import httpx

from corral.server.ui import ASSETS, dashboard_url
from tests.integration.conftest import Server


def test_the_dashboard_is_served_at_ui_with_every_module_it_imports(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        root = http.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        assert http.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        page = http.get("/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="app.js">' in page.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert page.headers["referrer-policy"] == "no-referrer"
        # every module reachable from app.js is served as JavaScript (no build step)
        seen, todo = set(), ["app.js"]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            asset = http.get(f"/ui/{name}")
            assert asset.status_code == 200, name
            assert "javascript" in asset.headers["content-type"], name
            base = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            for ref in re.findall(r'from "\./([\w/.]+)"', asset.text):
                todo.append(base + ref)
            for ref in re.findall(r'from "\.\./([\w/.]+)"', asset.text):
                todo.append(ref)
        assert {"app.js", "api.js", "store.js", "views/map.js", "views/job.js"} <= seen
        assert seen == {p.relative_to(ASSETS).as_posix() for p in ASSETS.rglob("*.js")}
        assert http.get("/ui/style.css").headers["content-type"].startswith("text/css")
        assert http.get("/ui/missing.js").status_code == 404
        # the page is public; the data is not
        assert http.get("/api/v1/nodes").status_code == 401


def test_login_links_carry_the_token_in_the_fragment_only() -> None:
    assert dashboard_url("http://127.0.0.1:7733/") == "http://127.0.0.1:7733/ui/"
    link = dashboard_url("http://127.0.0.1:7733", "crl_abc")
    assert link == "http://127.0.0.1:7733/ui/#token=crl_abc"
    assert "?" not in link
