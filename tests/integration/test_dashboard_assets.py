"""The dashboard's static assets: served at /ui/ from the package, with a strict policy."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from corral.server.ui import ASSETS, dashboard_url
from tests.integration.conftest import Server

NODE = shutil.which("node")
# Loads the served store.js in Node (fetch against the server, the token in a stand-in
# sessionStorage), refreshes once and prints what it holds and the /jobs calls it made.
LOAD_STORE = """
const asked = [];
const realFetch = globalThis.fetch;
const token = process.env.CORRAL_TOKEN;
globalThis.sessionStorage = { getItem: () => token, setItem() {}, removeItem() {} };
globalThis.fetch = (url, options) => {
  if (url.startsWith("/api/v1/jobs")) asked.push(url);
  return realFetch(process.env.CORRAL_URL + url, options);
};
const store = await import("./store.js");
await store.refresh();
console.log(JSON.stringify({ jobs: store.state.jobs.size, error: store.state.live.error, asked }));
"""


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


@pytest.mark.skipif(NODE is None, reason="needs Node.js to run the dashboard's modules")
def test_the_dashboard_pages_through_every_active_job(server: Server, tmp_path: Path) -> None:
    """GET /jobs answers one page (by default the newest 1,000): the dashboard's store
    asks for the older pages too (``before`` = the page's ``next``), as ``corral jobs``
    does, so a cluster with more active jobs shows every one."""
    client = server.client()
    client.submit({"command": ["true"], "array": "0-1099"})  # 1,100 pending jobs
    first = client.job_page()
    assert len(first.jobs) == 1000 and first.has_more  # the API's default page
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for name in ("store.js", "api.js", "util.js"):
            (tmp_path / name).write_text(http.get(f"/ui/{name}").text)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "load.js").write_text(LOAD_STORE)
    env = {**os.environ, "CORRAL_URL": server.url, "CORRAL_TOKEN": server.admin_token}
    assert NODE is not None
    ran = subprocess.run(
        [NODE, "load.js"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    loaded = json.loads(ran.stdout)
    assert loaded["error"] is None and loaded["jobs"] == 1100
    active = [u for u in loaded["asked"] if "all=true" not in u]
    assert active == ["/api/v1/jobs?limit=1000", f"/api/v1/jobs?limit=1000&before={first.next}"]
