"""Bad job kinds and roles are refused at submission, naming what is wrong, and nothing
is stored (SPEC section 8)."""

from __future__ import annotations

import pytest

from corral.errors import UnschedulableError, ValidationError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report

WORKERS = {"name": "worker", "nodes": 2, "resources": {"gpus": 8}}
BAD = [
    ({"kind": "spark"}, "unknown kind 'spark'; known kinds: "),
    ({"roles": [{"name": "a"}, {"name": "a"}]}, "role names must differ (a repeated)"),
    ({"roles": [WORKERS], "resources": {"gpus": 8}}, "remove the top-level resources"),
    ({"roles": [{"name": "Bad Name"}]}, "roles.0.name"),
    ({"roles": []}, "roles"),
    ({"roles": [{"name": "a", "resources": {"gpus": 3}, "tasks_per_node": 2}]}, "split evenly"),
    ({"jax": {}}, "jax: options of kind jax, but this job is of kind pytorch"),
    ({"kind": "jax", "jax": {"coordinator": "x"}}, "kind jax takes no options"),
    ({"kind": "tpu"}, "kind tpu needs resources.tpu"),
]


def test_bad_kinds_and_roles_are_refused_and_nothing_is_stored(server: Server) -> None:
    with server.http(server.admin_token) as http:
        for change, message in BAD:
            answer = http.post("/jobs", json={"command": ["true"], **change})
            assert answer.status_code == 422, (change, answer.text)
            assert message in answer.json()["message"], (change, answer.json()["message"])
    assert server.client().list(all=True) == []


def test_a_role_that_can_never_fit_is_refused_naming_the_role(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=8)
    FakeHardwareAgent(server, "node-b", gpus=8)
    client = server.client()
    too_big = {"name": "worker", "nodes": 2, "resources": {"gpus": 16}}
    with pytest.raises(UnschedulableError, match="role worker: can never fit"):
        client.submit({"command": "true", "roles": [{"name": "ps"}, too_big]})
    with pytest.raises(ValidationError, match="unknown kind"):
        client.submit({"command": "true", "kind": "nope"})
    assert client.list(all=True) == []
    fits = client.submit({"command": "true", "roles": [{"name": "ps"}, WORKERS]})
    assert fits.kind == "pytorch" and fits.world_size == 3 and fits.nodes == 3
    assert fits.roles == ["ps: 1 node", "worker: 2 nodes x 8 GPUs"]


def test_a_job_ends_with_its_non_daemon_tasks_and_a_failing_daemon_fails_it(
    server: Server,
) -> None:
    """An MPI job's slot holders serve its launcher (a daemon role): the launcher's exit
    decides the job, and a slot holder that fails while the job runs fails it."""
    a, b = FakeHardwareAgent(server, "node-a", gpus=8), FakeHardwareAgent(server, "node-b", gpus=8)
    client = server.client()
    mpi = {"kind": "mpi", "nodes": 1, "command": ["python", "allreduce.py"]}
    ok, broken = client.submit(mpi), client.submit(mpi)
    wait_for(lambda: all(client.get(j.id).state == "running" for j in (ok, broken)), 10, "placed")
    where = {(j.id, t.rank): t.node for j in (ok, broken) for t in client.get(j.id).tasks}
    agents = {"node-a": a, "node-b": b}

    def tell(job_id: int, rank: int, state: str, **extra: object) -> None:
        agents[where[(job_id, rank)]].sync([report(job_id, rank, state, **extra)])

    for job_id in (ok.id, broken.id):  # rank 0: the slot holder; rank 1: the launcher
        tell(job_id, 0, "running", pid=10)
        tell(job_id, 1, "running", pid=11)
    tell(ok.id, 1, "exited", exit_code=0)  # mpirun is done; the slot holder still runs
    done = client.get(ok.id)
    assert done.state == "succeeded", done.reason
    assert done.reason == "the task exited 0; the task serving it was stopped"
    assert [(t.role, t.daemon) for t in done.tasks] == [("worker", True), ("launcher", False)]
    tell(broken.id, 0, "exited", exit_code=1)  # a slot holder dies under a running mpirun
    failed = client.get(broken.id)
    assert failed.state == "failed" and "task 0 on" in (failed.reason or "")
