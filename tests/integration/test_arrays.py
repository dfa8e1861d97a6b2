"""Job arrays over the real API (SPEC section 9): elements run as a fake node reports their
tasks' exits; the CLI against the same server."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.client import Client
from corral.core.array import throttle_reason
from corral.errors import ConflictError, NotFoundError, ValidationError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report

ONE_GPU = {"command": "x", "resources": {"gpus": 1}}


def states(client: Client, ids: list[int]) -> list[str]:
    return [client.get(i).state for i in ids]


def end(node: FakeHardwareAgent, job_id: int, exit_code: int = 0) -> None:
    """The node reports the job's task exited with ``exit_code``."""
    node.sync([report(job_id, 0, "exited", exit_code=exit_code, ended_at=1.0)])


def test_a_throttled_array_runs_max_at_once_with_its_variables(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")  # 8 GPUs: room for all six
    client = server.client()
    sub = client.submit({**ONE_GPU, "name": "sweep", "array": "0-5%2"})
    array, ids = sub.id, sub.array.job_ids if sub.array else []
    assert sub.array is not None and (sub.array.job_id, sub.array.count) == (array, 6)
    assert (sub.array.spec, sub.array.tasks, sub.array.max_running) == ("0-5%2", "0-5", 2)
    assert ids[0] == array and len(set(ids)) == 6 and sub.ref == f"{array}_0"
    running = ["running"] * 2 + ["pending"] * 4
    wait_for(lambda: states(client, ids) == running, 10, "two elements running")
    held_back = client.get(f"{array}_4")
    assert held_back.id == ids[4] and held_back.ref == f"{array}_4"
    assert held_back.reason == throttle_reason(array, 2) and held_back.position is None
    assert held_back.reason == (
        f"waiting for array {array}'s throttle: at most 2 of its elements run at once (%2)"
    )
    # each element is a job of its own, with the array's variables
    tasks = {t["job_id"]: t["env"] for t in node.sync()["tasks"]}
    env = tasks[ids[1]]
    assert env["SLURM_JOB_ID"] == env["CORRAL_JOB_ID"] == str(ids[1])
    assert env["SLURM_ARRAY_JOB_ID"] == env["CORRAL_ARRAY_JOB_ID"] == str(array)
    assert env["SLURM_ARRAY_TASK_ID"] == env["CORRAL_ARRAY_TASK_ID"] == "1"
    counts = ("COUNT", "MIN", "MAX", "STEP")
    assert [env[f"SLURM_ARRAY_TASK_{k}"] for k in counts] == ["6", "0", "5", "1"]
    assert env["SLURM_JOB_NAME"] == "sweep"
    # one ends: the next index starts
    end(node, ids[0])
    wait_for(lambda: states(client, ids)[:3] == ["succeeded", "running", "running"], 10, "2")
    assert states(client, ids)[3:] == ["pending"] * 3
    # cancel one element by name, then the whole array by its id
    assert client.cancel(f"{array}_5").state == "cancelled"
    assert client.get(ids[4]).state == "pending"
    whole = client.cancel(array)
    assert whole.array is not None and whole.array.states == {"succeeded": 1, "cancelled": 5}
    assert states(client, ids) == ["succeeded"] + ["cancelled"] * 5
    assert client.get(ids[3]).events[-1].reason == "cancelled by user"
    with pytest.raises(ConflictError, match=f"job array {array} already ended"):
        client.cancel(array)
    with pytest.raises(NotFoundError, match=f"no job {array}_9"):
        client.get(f"{array}_9")


def test_dependencies_on_a_whole_array_and_on_one_element(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    arr = client.submit({**ONE_GPU, "array": "0-1"})
    ids = arr.array.job_ids if arr.array else []
    whole = client.submit({**ONE_GPU, "dependency": f"afterok:{arr.id}"})
    one = client.submit({**ONE_GPU, "dependency": f"afterok:{arr.id}_1"})
    notok = client.submit({**ONE_GPU, "dependency": f"afternotok:{arr.id}"})
    wait_for(lambda: states(client, ids) == ["running"] * 2, 10, "the array running")
    waits = f"waiting for every element of array {arr.id} to succeed (afterok)"
    wait_for(lambda: client.get(whole.id).reason == waits, 10, waits)
    waits_one = f"waiting for job {arr.id}_1 to succeed (afterok)"
    wait_for(lambda: client.get(one.id).reason == waits_one, 10, waits_one)
    end(node, ids[1])
    wait_for(lambda: client.get(one.id).state == "running", 10, "the element's dependent")
    assert client.get(whole.id).state == "pending"
    end(node, ids[0], exit_code=3)
    never = (
        f"dependency never satisfied: afterok:{arr.id}: 1 of 2 elements of array {arr.id} "
        "failed or were cancelled"
    )
    wait_for(lambda: client.get(whole.id).reason == never, 10, never)
    assert client.get(whole.id).state == "cancelled"
    wait_for(lambda: client.get(notok.id).state == "running", 10, "afternotok on the array")
    with pytest.raises(ValidationError, match=f"no job with {arr.id}_7"):
        client.submit({**ONE_GPU, "dependency": f"afterok:{arr.id}_7"})


def test_bad_arrays_are_refused_and_nothing_is_stored(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    client = server.client()
    before = len(client.list(all=True))
    cases = {
        "5-1": "range 5-1 is empty: the end is below the start",
        "0-15%0": "%0: the throttle must be at least 1",
        "1-3:0": "1-3:0: the step must be at least 1",
        "abc": "'abc' is not an index",
        "0-100000": "100001 elements; at most 100000 per array",
        "0-1000000": "index 1000000 is past the largest, 999999",
        "": "empty array spec",
        7: "expected a string",
    }
    with server.http(server.admin_token) as http:
        for spec, message in cases.items():
            answer = http.post("/jobs", json={**ONE_GPU, "array": spec})
            assert answer.status_code == 422, (spec, answer.text)
            assert message in answer.json()["message"], (spec, answer.text)
    alice = server.http(client.create_token("alice").token)
    answer = alice.post("/jobs", json={**ONE_GPU, "array": "0-10000"})  # past 10,000 pending
    assert answer.status_code == 429 and "this array would add 10001" in answer.text
    alice.close()
    assert len(client.list(all=True)) == before
    # a large array is one request; its elements are jobs in index order
    big = client.submit({**ONE_GPU, "array": "0-1999:2", "hold": True})
    assert big.array is not None and big.array.count == 1000
    assert big.array.job_ids == sorted(big.array.job_ids)
    assert len(client.list(all=True)) == before + 1000
    grouped = client.list(all=True, group_arrays=True)
    assert [j.array.states for j in grouped if j.array] == [{"pending": 1000}]
    assert client.get(f"{big.id}_1998").held


def test_the_cli_names_lists_holds_and_cancels_arrays(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=1)
    options = ["--server", server.url, "--token", server.admin_token]

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, [args[0], *options, *args[1:]])
        assert result.exit_code == 0, (args, result.output, result.exception)
        return result.output

    out = cli("submit", "--array", "0-3", "--gpus", "1", "--name", "grid", "--", "x")
    array = int(out.split()[3])
    assert out == f"submitted job array {array} (4 elements: {array}_[0-3])\n"
    client = server.client()
    wait_for(lambda: client.get(array).state == "running", 10, "the first element")
    rows = [line for line in cli("jobs").splitlines() if "grid" in line]
    assert len(rows) == 1 and rows[0].startswith(f"{array}_[0-3] ")
    assert "pending 3, running 1" in rows[0]
    expanded = [line.split()[0] for line in cli("jobs", "-r").splitlines() if "grid" in line]
    assert expanded == [f"{array}_{i}" for i in range(4)]
    listed = json.loads(cli("jobs", "-o", "json"))["jobs"]
    assert [(j["id"], j["array"]["states"]) for j in listed] == [
        (array, {"pending": 3, "running": 1})
    ]
    shown = cli("show", str(array))
    assert f"job {array}_0" in shown and f"{array}_[0-3]: pending 3, running 1" in shown
    assert cli("hold", str(array)) == f"job array {array}: pending 3, running 1\n"
    assert client.get(f"{array}_3").held
    assert cli("release", f"{array}_2").split() == ["job", f"{array}_2:", "pending"]
    assert cli("cancel", f"{array}_1").split() == ["job", f"{array}_1:", "cancelled"]
    assert cli("cancel", str(array)) == f"job array {array}: cancelled 4\n"
