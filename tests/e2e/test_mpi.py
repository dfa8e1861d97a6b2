"""``kind: mpi`` with a real server and agents (SPEC section 8): Open MPI's ``mpirun`` in the
launcher task starts its daemons on the job's nodes as job steps (never ssh), an unchanged
``mpi4py`` program runs on 2 nodes x 2 ranks, a failed rank fails the job with its exit
code, a cancel leaves no rank behind, and bad input is refused with nothing stored. The rsh
agent is also driven on its own, without mpirun."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest

from corral.errors import ValidationError
from tests.e2e.cluster import LocalCluster, pid_alive, wait_for

pytestmark = pytest.mark.e2e
needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs Open MPI's mpirun (Debian: openmpi-bin) and mpi4py",
)

ALLREDUCE = r"""
import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank, op=MPI.SUM)
env = os.environ
print(f"rank {comm.rank} of {comm.size} node {env['CORRAL_NODE']} local {env['LOCAL_RANK']} "
      f"gpus {env['CUDA_VISIBLE_DEVICES']} RANK {env['RANK']} sum {total}", flush=True)
"""

RECORD = re.compile(
    r"rank (\d+) of (\d+) node (\S+) local (\d+) gpus ([\d,]*) RANK (\d+) sum (\d+)"
)
FIELDS = ("size", "node", "local", "gpus", "RANK", "sum")

FAIL_RANK_1 = r"""
import sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
sys.exit(3 if comm.rank == 1 else 0)
"""

HOLD = r"""
import os, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
with open(os.path.join(os.environ["OUT"], f"{comm.rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


def mpi_job(program: str, **extra: object) -> dict:
    return {
        "kind": "mpi",
        "nodes": 2,
        "tasks_per_node": 2,
        "resources": {"gpus": 4},
        "command": [sys.executable, "-c", program],
        # no mpi.python: the launcher runs on the agent's interpreter ($CORRAL_PYTHON)
        "grace_period": "5s",
        **extra,
    }


@needs_mpi
def test_mpi4py_allreduce_on_two_nodes_through_job_steps(cluster: LocalCluster) -> None:
    client = cluster.client()
    job = client.submit(mpi_job(ALLREDUCE))
    done = client.wait(job.id, timeout=120)[0]
    launcher = len(done.tasks) - 1  # the launcher comes after the 4 worker tasks
    log = client.logs(job.id, task=launcher)
    assert done.state == "succeeded", f"{done.reason}\n{log}"
    # one record per rank (mpirun relays each rank's output: lines of two ranks may meet)
    found = RECORD.findall(log)
    ranks = {int(r[0]): dict(zip(FIELDS, r[1:], strict=True)) for r in found}
    assert sorted(ranks) == [0, 1, 2, 3] and len(found) == 4, log
    assert {r["size"] for r in ranks.values()} == {"4"}
    assert {r["sum"] for r in ranks.values()} == {"6"}  # 0 + 1 + 2 + 3
    # ranks 0, 1 on the first worker node, 2, 3 on the other; RANK is the MPI rank
    assert ranks[0]["node"] == ranks[1]["node"] != ranks[2]["node"] == ranks[3]["node"]
    assert [ranks[r]["RANK"] for r in range(4)] == ["0", "1", "2", "3"]
    assert [ranks[r]["local"] for r in range(4)] == ["0", "1", "0", "1"]
    for first in (0, 2):  # each rank sees its own 2 of its node's 4 GPUs
        pair = [ranks[first]["gpus"].split(","), ranks[first + 1]["gpus"].split(",")]
        assert all(len(gpus) == 2 for gpus in pair) and not set(pair[0]) & set(pair[1])

    assert f"corral logs {job.id} --task 4" in client.logs(job.id, task=0)  # where to look
    default = cluster.cli("logs", str(job.id))  # the first task that is no daemon
    assert default.returncode == 0 and RECORD.search(default.stdout), default.stdout
    shown = client.get(job.id)
    roles = [(t.rank, t.role) for t in shown.tasks]
    assert roles == [(0, "worker"), (1, "worker"), (2, "worker"), (3, "worker"), (4, "launcher")]
    steps = client.steps(job.id)  # one Open MPI daemon per worker node, started as a step
    assert len(steps) == 2 and all(s.exit_code == 0 for s in steps)
    assert all("orted" in " ".join(s.command) for s in steps)
    assert {s.tasks[0].node for s in steps} == {ranks[0]["node"], ranks[2]["node"]}


@needs_mpi
def test_a_failed_rank_fails_the_job_with_its_exit_code(cluster: LocalCluster) -> None:
    client = cluster.client()
    job = client.submit(mpi_job(FAIL_RANK_1))
    done = client.wait(job.id, timeout=120)[0]
    launcher = done.tasks[-1]
    assert done.state == "failed", client.logs(job.id, task=launcher.rank)
    assert launcher.role == "launcher" and launcher.exit_code == 3


@needs_mpi
def test_cancelling_an_mpi_job_leaves_no_rank_behind(cluster: LocalCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(mpi_job(HOLD, env={"OUT": str(out)}))
    pids = wait_for(
        lambda: len(list(out.glob("*.pid"))) == 4 and list(out.glob("*.pid")), 60, "4 ranks"
    )
    pids = [int(p.read_text()) for p in pids]
    assert all(pid_alive(pid) for pid in pids)
    client.cancel(job.id)
    assert client.wait(job.id, timeout=60)[0].state == "cancelled"
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), 30, "the ranks to end")

    def steps_ended() -> bool:
        steps = client.steps(job.id)
        return len(steps) == 2 and all(s.state == "ended" for s in steps)

    wait_for(steps_ended, 30, "both daemons' steps to end")


# The rsh agent without mpirun: rank 0 of a plain 2-node job runs commands on the other node
# through it, on its own (SDK) and through a step broker, and cancels one with SIGTERM.
AGENT = r"""
import json, os, signal, subprocess, sys, tempfile, time
from corral.client import Client
from corral.client.config import resolve_job
from corral.kinds.mpi_steps import StepBroker
env, out = os.environ, os.environ["OUT"]
if env["RANK"] != "0":
    while not os.path.exists(os.path.join(out, "done")):
        time.sleep(0.1)  # this node's task keeps the node in the job
    sys.exit(0)
other = ({"node-a", "node-b"} - {env["CORRAL_NODE"]}).pop()
agent = [sys.executable, "-m", "corral.kinds.mpi_rsh"]
res = {"other": other}
run = subprocess.run(agent + [other, "echo oops on $CORRAL_NODE;", "exit 5"],
                     capture_output=True, text=True, timeout=60)
res["alone"] = [run.returncode, run.stderr]
job = resolve_job()
with Client(job.server, job.token) as c:
    broker = StepBroker(c, job.job_id, os.path.join(tempfile.mkdtemp(), "broker"))
    broker.start()
    benv = {**env, "CORRAL_MPI_BROKER": broker.path}
    run = subprocess.run(agent + ["-x", other, "exit", "7"], env=benv, capture_output=True,
                         text=True, timeout=60)
    res["brokered"] = [run.returncode, run.stderr]
    held = subprocess.Popen(agent + [other, "sleep 600"], env=benv)
    while not any(s.step == 3 and s.state == "running" for s in c.steps(job.job_id)):
        time.sleep(0.1)
    held.send_signal(signal.SIGTERM)
    res["cancelled"] = held.wait(60)
    broker.close()
    steps = c.steps(job.job_id)
    res["steps"] = [[s.step, s.exit_code, s.cancelled, s.tasks[0].node] for s in steps]
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump(res, f)
open(os.path.join(out, "done"), "w").close()
"""


def test_the_rsh_agent_runs_commands_as_steps_and_cancels_them(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(
        {
            "nodes": 2,
            "command": [sys.executable, "-c", AGENT],
            "env": {"OUT": str(out)},
            "grace_period": "5s",
        }
    )
    done = client.wait(job.id, timeout=120)[0]
    assert done.state == "succeeded", client.logs(job.id)
    res = json.loads((out / "result.json").read_text())
    other = res["other"]
    assert res["alone"][0] == 5 and f"oops on {other}" in res["alone"][1]
    assert (
        res["brokered"][0] == 7
        and f"on {other} (step 2) ended: exited, exit code 7" in (res["brokered"][1])
    )
    assert res["cancelled"] == 128 + signal.SIGTERM
    assert res["steps"] == [[1, 5, False, other], [2, 7, False, other], [3, 143, True, other]]


BAD = [
    ({"mpi": {"ranks": 3}}, "mpi.ranks: 3 ranks do not divide evenly over the job's 2 nodes"),
    ({"mpi": {"ranks": 6}}, "6 ranks are 3 per node, which cannot split each node's 4 GPUs"),
    ({"mpi": {"rank": 4}}, "mpi.rank: not an option of kind mpi (options: bind_gpus,"),
    ({"mpi": {"mpirun_args": ["-np", "2"]}}, "mpi.mpirun_args: -np is set by Corral"),
    ({"kind": "pytorch", "mpi": {}}, "mpi: options of kind mpi, but this job is of kind pytorch"),
]


def test_bad_mpi_jobs_are_refused_and_nothing_is_stored(cluster: LocalCluster) -> None:
    client = cluster.client()
    for change, message in BAD:
        with pytest.raises(ValidationError) as refused:
            client.submit({**mpi_job("pass"), **change})
        assert message in str(refused.value), (change, str(refused.value))
    roles = {"kind": "mpi", "command": ["true"], "roles": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ValidationError, match="roles: kind mpi makes its own roles"):
        client.submit(roles)
    assert client.list(all=True) == []
