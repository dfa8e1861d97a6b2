"""The web dashboard in headless Chromium (Playwright) against a real server and agents.

Debian's chromium is used as it is (no browser download); the tests skip where it is not
installed. Screenshots go to ``$CORRAL_TEST_ARTIFACTS`` if set, else a pytest tmp dir;
the directory is printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import Client
from corral.schemas.manifest import JobManifest
from tests.e2e.cluster import LocalCluster, wait_for

playwright = pytest.importorskip("playwright.sync_api")
playwright.expect.set_options(timeout=30_000)
CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CONFIG = """
queues:
  - {name: team-a, quota: {gpus: 8}, cohort: research, borrowing_limit: {gpus: 8}}
  - name: team-b
    quota: {gpus: 8}
    cohort: research
    idle: {threshold: 5, after: 1s, action: flag}
policy: {preemption: false, interval: 1s}
"""
# Sets its GPUs' simulated load (CORRAL_SIM_LOAD_FILE, argv[1] %), then prints steps.
TICKER = """
import json, os, sys, time
path = os.environ["CORRAL_SIM_LOAD_FILE"]
with open(path + ".tmp", "w") as f:
    json.dump({"utilization": float(sys.argv[1]), "memory_used": "40GB"}, f)
os.replace(path + ".tmp", path)
for i in range(9999):
    print("step", i, flush=True)
    time.sleep(0.3)
"""
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def dash_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two 8-GPU nodes under two leaf switches, two queues of a cohort."""
    c = LocalCluster(tmp_path_factory.mktemp("dashboard") / "home", config=CONFIG)
    try:
        c.start_server()
        c.start_agent("node-a", "8xH100", "--network", "zone-1/spine-1/leaf-1")
        c.start_agent("node-b", "8xH100", "--network", "zone-1/spine-1/leaf-2")
        c.wait_nodes("node-a", "node-b")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("CORRAL_TEST_ARTIFACTS")
    path = Path(where) / "dashboard" if where else tmp_path_factory.mktemp("dashboard-shots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\ndashboard screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1366, "height": 768})  # type: ignore[attr-defined]
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def submit(client: Client, queue: str, name: str, load: int) -> int:
    """An 8-GPU job whose GPUs read ``load`` % utilization."""
    manifest = JobManifest.model_validate(
        {
            "name": name,
            "queue": queue,
            "resources": {"gpus": 8},
            "grace_period": "1s",
            "time_limit": "10m",  # lets the scheduler estimate when waiting jobs start
            "command": [sys.executable, "-u", "-c", TICKER, str(load)],
        }
    )
    return client.submit(manifest).id


def gpu_cells(page: object, job_id: int) -> object:
    return page.locator(f'.gpu[data-jobs="{job_id}"]')  # type: ignore[attr-defined]


def test_login_form_refuses_a_bad_token_and_the_link_logs_in(
    dash_cluster: LocalCluster, page: object, shots: Path
) -> None:
    expect = playwright.expect
    page.goto(f"{dash_cluster.url}/ui/")
    page.fill("#token", "not-a-token")
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("This token was not accepted.")
    page.screenshot(path=shots / "login.png")

    token = dash_cluster.client().token
    page.goto(f"{dash_cluster.url}/ui/#token={token}")
    expect(page.locator("#live")).to_contain_text("live")
    assert "token" not in page.url  # the fragment is dropped once read
    assert page.evaluate("sessionStorage.getItem('corral.token')") == token
    expect(page.locator(".gpu")).to_have_count(16)
    assert page.locator(".switch").evaluate_all("els => els.map(e => e.dataset.switch)") == [
        "zone-1 › spine-1 › leaf-1",
        "zone-1 › spine-1 › leaf-2",
    ]
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()

    # A user's own token works the same way; revoking it signs the page out.
    admin = dash_cluster.client()
    created = admin.create_token("alice")
    page.fill("#token", created.token)
    page.click("#login button[type=submit]")
    expect(page.locator(".gpu")).to_have_count(16)
    admin.revoke_token(created.id)
    expect(page.locator("#login-error")).to_contain_text("Signed out")
    assert page.evaluate("sessionStorage.getItem('corral.token')") is None


def test_watch_jobs_land_queues_fill_and_a_preemption_live(
    dash_cluster: LocalCluster, page: object, shots: Path
) -> None:
    """Everything a user watching sees arrives over the events stream (no reload, no
    polling), with the GPUs' utilization from the tasks' own simulated load."""
    expect = playwright.expect
    client = dash_cluster.client()
    page.goto(f"{dash_cluster.url}/ui/")
    page.fill("#token", client.token)
    page.click("#login button[type=submit]")
    expect(page.locator(".gpu.free")).to_have_count(16)
    expect(page.locator("#live")).to_have_attribute("data-mode", "events")
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

    first = submit(client, "team-a", "train-a", load=73)
    expect(gpu_cells(page, first)).to_have_count(8)
    # each cell shows its GPU's utilization: the load the job's task declared
    expect(gpu_cells(page, first).locator(".pct", has_text="73%")).to_have_count(8)
    second = submit(client, "team-a", "train-b", load=41)
    expect(gpu_cells(page, second)).to_have_count(8)
    team_a = page.locator('.qbar[data-queue="team-a"]')
    expect(team_a).to_have_attribute("data-used", "16")
    expect(team_a).to_have_attribute("data-borrowed", "8")  # lent by team-b (same cohort)
    expect(page.locator('[data-stat="util"] b')).to_have_text("57%")  # (73 + 41) / 2
    waiting = submit(client, "team-b", "eval-b", load=0)  # will sit idle once it runs
    page.click("[data-color-by=job]")
    page.screenshot(path=shots / "map-by-job.png")
    page.click("[data-color-by=queue]")
    expect(page.locator(f'#feed li[data-id="{waiting}"]')).to_have_count(1)
    page.screenshot(path=shots / "map.png")

    page.click("nav >> text=Queues")
    row = page.locator(f'#pending tr[data-job="{waiting}"]')
    expect(row).to_contain_text("team-b")
    assert row.locator(".reason").inner_text().strip()  # why it waits
    expect(row.locator(".estimate")).to_contain_text("in ")  # within the running jobs' limits
    page.screenshot(path=shots / "queues.png")

    page.click("nav >> text=Jobs")
    expect(page.locator("#jobs tbody tr")).to_have_count(3)
    page.fill("#f-text", "train-b")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    page.fill("#f-text", "")
    page.select_option("#f-state", "pending")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    page.select_option("#f-state", "all")
    page.select_option("#f-queue", "team-a")
    expect(page.locator("#jobs tbody tr")).to_have_count(2)
    page.screenshot(path=shots / "jobs.png")

    # The job page: placement, live logs, its GPUs' utilization over time, and a
    # preemption through the button.
    page.click(f'#jobs tr[data-job="{first}"] td.num a')
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.locator("#logs")).to_contain_text("step 2")
    expect(page.locator("table tr[data-rank]")).to_have_count(1)
    expect(page.locator("#job-util svg.plot polyline")).to_have_count(8)  # a line per GPU
    expect(page.locator("#job-util .legend .key")).to_have_count(8)
    page.screenshot(path=shots / "job-running.png")
    page.click("[data-action=preempt]")
    page.click("[data-action=preempt]")  # the second click confirms
    expect(page.locator("#job-attempt")).to_have_text("attempt 1")
    expect(page.locator("#job-events li", has_text="preempted by user")).not_to_have_count(0)
    # team-b's waiting job takes the freed GPUs; the preempted one waits for its turn.
    expect(page.locator("#job-state")).to_have_text("pending")
    page.screenshot(path=shots / "job-preempted.png")
    page.click("[data-action=cancel]")
    page.click("[data-action=cancel]")
    expect(page.locator("#job-state")).to_have_text("cancelled")
    expect(page.locator("[data-action]")).to_have_count(0)

    # A preemption made elsewhere shows on the map as it happens; the job whose GPUs read
    # 0% is flagged idle there and on its page.
    page.click("nav >> text=Cluster")
    expect(gpu_cells(page, waiting)).to_have_count(8)
    client.preempt(second)
    expect(page.locator(f'#feed li[data-id="{second}"][data-to="preempting"]')).to_have_count(1)
    expect(page.locator(f'#feed li[data-id="{first}"][data-to="cancelled"]')).to_have_count(1)
    expect(page.locator(f'.gpu.idle[data-jobs="{waiting}"]')).to_have_count(8)
    expect(page.locator(f'#feed li[data-id="{waiting}"] .badge.idle')).to_have_count(1)
    wait_for(lambda: client.get(second).attempt == 1, 30, "the preempted job to be requeued")
    expect(gpu_cells(page, second)).to_have_count(8)  # placed again: its GPUs were free
    page.screenshot(path=shots / "map-after-preemption.png")

    page.click(f'.gpu[data-jobs="{waiting}"] >> nth=0')
    expect(page.locator("#job-idle")).to_have_text("idle")
    expect(page.locator("#job-idle-since")).to_contain_text("flagged")
    page.screenshot(path=shots / "job-idle.png")

    page.click("table tr[data-rank] a")  # the node it runs on, with its telemetry
    expect(page.locator("#node-state")).to_have_text("ready")
    expect(page.locator("#node-plots svg.plot")).to_have_count(4)
    expect(page.locator("#node-plots svg.plot").first.locator("polyline")).to_have_count(8)
    page.screenshot(path=shots / "node.png")
    assert page.evaluate("window.__sameDocument") is True
    assert page.locator("#live").get_attribute("data-mode") == "events"
    for job_id in (second, waiting):
        client.cancel(job_id)
    wait_for(lambda: not client.list(), 30, "the jobs to end")
