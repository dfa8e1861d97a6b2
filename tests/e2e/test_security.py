"""Safe on a shared cluster (SPEC section 7), tried as a hostile user would, with real
Unix accounts (``useradd``), real agents, real cgroups and real signals, on SQLite and
PostgreSQL: identity, private checkpoints, secrets out of reach, memory limits, nothing
outlives a cancel, the grace cap, node takeover, and an agent's SIGKILL and restart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.client import Client
from corral.errors import CorralError
from tests.e2e.accounts import CAN_ADD_USERS, unix_accounts
from tests.e2e.cluster import LocalCluster, pid_alive, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CAN_ADD_USERS, reason="needs root and useradd"),
]

FINAL = ("succeeded", "failed", "cancelled")
# The tests' own interpreter may sit under a directory only root can enter (a virtual
# environment in root's home): tasks of other accounts run the system's Python.
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


@dataclass
class Shared:
    """One cluster for the module, with two users who each have a Unix account."""

    cluster: LocalCluster
    alice: Client
    bob: Client
    alice_name: str
    bob_name: str
    scratch: Path  # world-writable: tasks of any account leave their results here

    def done(self, client: Client, job_id: int, timeout: float = 60) -> object:
        return wait_for(
            lambda: (j := client.get(job_id)).state in FINAL and j, timeout, f"job {job_id}"
        )

    def output(self, client: Client, job_id: int) -> str:
        self.done(client, job_id)
        return wait_for(lambda: client.logs(job_id) or " ", 10, "the log").strip()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(request: pytest.FixtureRequest) -> Iterator[Shared]:
    # The home's parent is traversable by everyone: what keeps users out is the home's
    # own mode, which the server sets (0700).
    with tempfile.TemporaryDirectory(prefix="crl-sec-", dir="/tmp") as top:
        base = Path(top)
        os.chmod(base, 0o755)
        scratch = base / "scratch"
        scratch.mkdir(mode=0o1777)
        os.chmod(scratch, 0o1777)
        checkpoints = base / "checkpoints"
        db = None
        if request.param == "postgresql":
            db = request.getfixturevalue("postgres_server").new_database()
        cluster = LocalCluster(
            base / "home",
            db=db,
            server_args=("--max-grace-period", "2m", "--log-cap", "1MB"),
            checkpoint_root=checkpoints,
        )
        with unix_accounts("alice", "bob") as (alice, bob):
            try:
                cluster.start_server()
                for name in ("node-a", "node-b"):
                    cluster.start_agent(name)
                cluster.wait_nodes("node-a", "node-b")
                tokens = {}
                for user in (alice, bob):
                    made = cluster.cli("token", "create", "--user", user, "-o", "json")
                    tokens[user] = json.loads(made.stdout)["token"]
                yield Shared(
                    cluster,
                    Client(cluster.url, tokens[alice]),
                    Client(cluster.url, tokens[bob]),
                    alice,
                    bob,
                    scratch,
                )
            finally:
                cluster.stop()


def sh(command: str, **extra: object) -> dict:
    return {"command": command, "grace_period": "1s", **extra}


def test_tasks_run_as_their_owner_with_its_groups_and_home(shared: Shared) -> None:
    job = shared.alice.submit(
        sh('id -un; id -u; id -g; echo "$HOME $USER $LOGNAME"; env | cut -d= -f1')
    )
    lines = shared.output(shared.alice, job.id).splitlines()
    account = __import__("pwd").getpwnam(shared.alice_name)
    assert lines[0] == shared.alice_name
    assert lines[1:3] == [str(account.pw_uid), str(account.pw_gid)]
    assert lines[3] == f"{account.pw_dir} {shared.alice_name} {shared.alice_name}"
    # The task sees only the CORRAL_* variables set for it: no token, join token or home;
    # and of the agent's own environment only what is portable (PATH, not the rest).
    seen = set(lines[4:])
    assert {"CORRAL_JOB_ID", "CORRAL_JOB_TOKEN", "CORRAL_CHECKPOINT_DIR", "PATH"} <= seen
    assert not seen & {"CORRAL_TOKEN", "CORRAL_JOIN_TOKEN", "CORRAL_HOME"}
    assert "PYTHONUNBUFFERED" in shared.cluster.env and "PYTHONUNBUFFERED" not in seen
    assert shared.alice.get(job.id).state == "succeeded"


def test_a_missing_account_fails_the_task_naming_account_and_node(shared: Shared) -> None:
    ghost = f"crl-ghost-{os.urandom(3).hex()}"  # no such account on the nodes
    made = shared.cluster.cli(
        "token", "create", "--user", "carol", "--unix-user", ghost, "-o", "json"
    )
    carol = Client(shared.cluster.url, json.loads(made.stdout)["token"])
    job = carol.submit(sh("true"))
    ended = shared.done(carol, job.id)
    assert ended.state == "failed" and ended.unix_user == ghost
    node = ended.tasks[0].node
    assert f"no Unix account '{ghost}' on node {node}" in (ended.reason or "")


def test_checkpoints_are_private_to_their_owner(shared: Shared) -> None:
    secret = shared.alice.submit(sh('echo weights > "$CORRAL_CHECKPOINT_DIR/model.pt"'))
    assert shared.done(shared.alice, secret.id).state == "succeeded"
    directory = shared.cluster.checkpoint_root / f"job-{secret.id}"
    info = directory.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == __import__("pwd").getpwnam(shared.alice_name).pw_uid
    # Bob knows where it is, and can neither read it nor overwrite it.
    thief = shared.bob.submit(
        sh(f"cat {directory}/model.pt; echo stolen > {directory}/model.pt; ls {directory}")
    )
    ended = shared.done(shared.bob, thief.id)
    assert ended.state == "failed"
    assert "Permission denied" in shared.bob.logs(thief.id)
    assert (directory / "model.pt").read_text() == "weights\n"


def test_the_control_planes_secrets_are_out_of_reach(shared: Shared) -> None:
    home = shared.cluster.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("token", "join-token"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    if shared.cluster.db.startswith("sqlite"):
        assert stat.S_IMODE((home / "corral.db").stat().st_mode) == 0o600
    job = shared.alice.submit(
        sh(f"cat {home}/token; cat {home}/join-token; head -c 16 {home}/corral.db; ls {home}")
    )
    assert shared.done(shared.alice, job.id).state == "failed"
    log = shared.alice.logs(job.id)
    assert log.count("Permission denied") == 4
    assert "crl_" not in log  # no token text leaked


def test_a_task_past_its_memory_limit_ends_out_of_memory(shared: Shared) -> None:
    hog = f"{PY} -c 'x = bytearray(256 << 20); print(len(x))'"
    job = shared.alice.submit(sh(hog, resources={"memory": "64MB"}))
    ended = shared.done(shared.alice, job.id)
    assert ended.state == "failed"
    assert "out of memory" in (ended.reason or "")
    task = ended.tasks[0]
    assert task.exit_code == 137
    assert task.peak_memory is not None and task.peak_memory <= 64 * 1000 * 1000 * 1.1


def test_usage_reports_cpu_seconds_and_peak_memory(shared: Shared) -> None:
    busy = f"{PY} -c 'x = bytearray(32 << 20); sum(range(3_000_000))'"
    job = shared.alice.submit(sh(busy))
    ended = shared.done(shared.alice, job.id)
    assert ended.state == "succeeded"
    task = ended.tasks[0]
    assert task.cpu_seconds is not None and task.cpu_seconds > 0
    assert task.peak_memory is not None and task.peak_memory >= 32 << 20
    shown = shared.cluster.cli("show", str(job.id), "-o", "json").stdout
    assert json.loads(shown)["tasks"][0]["cpu_seconds"] > 0


# Starts a setsid'd sleeper and a double-forked daemon that ignores SIGTERM; records pids.
ESCAPE = r"""
import os, signal, subprocess, sys, time
out = sys.argv[1]
sid = subprocess.Popen(["setsid", "sleep", "1000"]).pid
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(out + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(1000)
    os._exit(0)
with open(out + ".sid", "w") as f:
    f.write(str(sid))
time.sleep(1000)
"""


def _written(path: Path) -> bool:
    return path.exists() and bool(path.read_text().strip())


def test_setsid_and_daemons_die_with_the_job(shared: Shared) -> None:
    out = shared.scratch / f"escape-{os.urandom(3).hex()}"
    job = shared.alice.submit({"command": [PY, "-c", ESCAPE, str(out)], "grace_period": "1s"})
    daemon, sid = Path(f"{out}.daemon"), Path(f"{out}.sid")
    # (a file exists once opened: wait for its pid to be written too)
    wait_for(lambda: _written(daemon) and _written(sid), 30, "the escapees to start")
    pids = [int(daemon.read_text()), int(sid.read_text())]
    assert all(pid_alive(p) for p in pids)
    shared.alice.cancel(job.id)
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "the escapees to die")
    wait_for(
        lambda: all(n.gpus_used == 0 for n in shared.cluster.client().nodes()), 20, "free GPUs"
    )


def test_grace_periods_are_capped_at_submission(shared: Shared) -> None:
    for value, says in (("1e308", "at most"), ("3m", "maximum of 120s")):
        with pytest.raises(CorralError) as refused:
            shared.alice.submit(sh("true", grace_period=value))
        assert "grace_period" in str(refused.value) and says in str(refused.value)
    assert shared.alice.submit(sh("true", grace_period="2m")).id > 0


def test_a_second_agent_cannot_take_over_a_nodes_name(shared: Shared) -> None:
    join = (shared.cluster.home / "join-token").read_text().strip()
    body = {
        "name": "node-a",
        "agent_id": "intruder",
        "address": "127.0.0.1",
        "cpus": 8,
        "memory": 1 << 30,
    }
    answer = httpx.post(
        f"{shared.cluster.url}/api/v1/agent/register",
        json=body,
        headers={"Authorization": f"Bearer {join}"},
    )
    assert answer.status_code == 403, answer.text
    assert "node-a" in answer.json()["message"]
    answer = httpx.post(
        f"{shared.cluster.url}/api/v1/agent/register",
        json={**body, "credential": "guessed"},
        headers={"Authorization": f"Bearer {join}"},
    )
    assert answer.status_code == 403
    node = {n.name: n for n in shared.cluster.client().nodes()}["node-a"]
    assert node.state == "ready"


def test_an_agent_joins_with_a_token_file_that_no_process_list_shows(shared: Shared) -> None:
    cluster = shared.cluster
    elsewhere = cluster.home.parent / f"node-c-home-{os.urandom(3).hex()}"
    elsewhere.mkdir()
    token_file = elsewhere / "join"
    token_file.write_text((cluster.home / "join-token").read_text())
    join = token_file.read_text().strip()
    name = "node-c"
    env = {**cluster.env, "CORRAL_HOME": str(elsewhere)}  # no join token to be found there
    command = [sys.executable, "-m", "corral", "agent", "--server", cluster.url]
    command += ["--name", name, "--simulate", "1xH100", "--join-token-file", str(token_file)]
    agent = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: any(n.name == name and n.state == "ready" for n in cluster.client().nodes()),
            30,
            "the agent to join",
        )
        assert join.encode() not in Path(f"/proc/{agent.pid}/cmdline").read_bytes()
        assert (
            stat.S_IMODE((elsewhere / "agents" / name / "state" / "node-credential").stat().st_mode)
            == 0o600
        )
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_nodes_show_job_ids_only_to_their_owners(shared: Shared) -> None:
    job = shared.alice.submit(sh("sleep 30", resources={"gpus": 1}))
    wait_for(lambda: shared.alice.get(job.id).state == "running", 30, "the job to run")
    try:
        assert job.id in _job_ids(shared.alice.nodes())
        assert job.id in _job_ids(shared.cluster.client().nodes())  # an admin
        bobs = shared.bob.nodes()
        assert job.id not in _job_ids(bobs)
        assert sum(n.gpus_used for n in bobs) >= 1  # the GPU still shows as used
    finally:
        shared.alice.cancel(job.id)


def _job_ids(nodes: list) -> set[int]:
    return {j for n in nodes for j in n.jobs} | {
        j for n in nodes for d in n.devices for j in d.used_by
    }


# Records its pid; exits with 3 when the file argv[2] appears (the test creates it while
# the agent is down).
WAITER = r"""
import os, sys, time
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
sys.exit(3)
"""


def test_agent_sigkill_and_restart_reattaches_and_double_books_nothing(shared: Shared) -> None:
    cluster, alice = shared.cluster, shared.alice
    tag = os.urandom(3).hex()
    stays, ends = shared.scratch / f"stays-{tag}", shared.scratch / f"ends-{tag}"

    def waiter(path: Path) -> dict:
        command = [PY, "-c", WAITER, f"{path}.pid", f"{path}.go"]
        return {"resources": {"gpus": 4}, "command": command, "grace_period": "1s"}

    long = alice.submit(waiter(stays))
    wait_for(lambda: Path(f"{stays}.pid").exists(), 30, "the long task to start")
    victim = alice.get(long.id).tasks[0].node
    short = alice.submit({**waiter(ends), "node_selector": {}})
    wait_for(lambda: Path(f"{ends}.pid").exists(), 30, "the short task to start")
    assert alice.get(short.id).tasks[0].node == victim  # binpack: the same node
    pids = [int(Path(f"{p}.pid").read_text()) for p in (stays, ends)]

    cluster.kill_agent(victim)
    Path(f"{ends}.go").touch()  # the short task ends while its agent is down
    wait_for(lambda: not pid_alive(pids[1]), 20, "the short task to end")
    cluster.start_agent(victim)

    ended = shared.done(alice, short.id)
    assert (ended.state, ended.exit_code, ended.attempt) == ("failed", 3, 0)
    running = alice.get(long.id)
    assert (running.state, running.attempt) == ("running", 0)  # re-adopted, not requeued
    assert pid_alive(pids[0])
    # The server still counts the long job's 4 GPUs as held: nothing else gets them.
    node = {n.name: n for n in cluster.client().nodes()}[victim]
    assert node.gpus_used == 4 and node.state == "ready"
    Path(f"{stays}.go").touch()
    ended = shared.done(alice, long.id)
    assert (ended.exit_code, ended.attempt) == (3, 0)


LOUD = "import sys\nfor i in range(80_000):\n    sys.stdout.write('%07d' % i + 'x' * 92 + '\\n')"


def test_log_cap_and_prompt_job_end(shared: Shared) -> None:
    # 8 MB of output against a 1 MB cap: the job ends, the log keeps its newest MB and says
    # what was dropped; the agent keeps nothing once the server has it.
    job = shared.alice.submit({"command": [PY, "-c", LOUD], "grace_period": "1s"})
    ended = shared.done(shared.alice, job.id)
    assert ended.state == "succeeded"
    log = wait_for(
        lambda: (text := shared.alice.logs(job.id)).endswith("x\n") and text, 20, "the log"
    )
    assert "dropped" in log.splitlines()[0]
    assert len(log) <= 1_100_000
    assert log.splitlines()[-1].startswith("0079999")
    node = ended.tasks[0].node
    logs = shared.cluster.home / "agents" / node / "logs" / f"job-{job.id}"
    wait_for(lambda: not any(p.is_file() for p in logs.rglob("*")), 20, "the agent's copy to go")
