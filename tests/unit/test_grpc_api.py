"""The gRPC definitions stay in step with the REST bodies, its generated modules are what
regenerating gives, and errors map to status codes and back to the same classes."""

from __future__ import annotations

import filecmp
import types
import typing
from pathlib import Path

import grpc
import pytest
from pydantic import BaseModel

from corral import errors
from corral.api import generate
from corral.api.convert import CODE_KEY, error_of, status_of, to_dict, to_message
from corral.api.v1 import corral_pb2 as pb
from corral.schemas import api, steps

PAIRS: list[tuple[type[BaseModel], type]] = [
    (api.JobOut, pb.Job),
    (api.TaskOut, pb.Task),
    (api.EventOut, pb.JobEvent),
    (api.AttemptOut, pb.Attempt),
    (api.ArrayOut, pb.JobArray),
    (api.JobList, pb.JobList),
    (api.AdviceOut, pb.Advice),
    (api.LogOut, pb.LogChunk),
    (api.DeviceOut, pb.Device),
    (api.NodeOut, pb.Node),
    (api.NodeList, pb.NodeList),
    (api.NoticeOut, pb.Notice),
    (api.TokenOut, pb.Token),
    (api.TokenList, pb.TokenList),
    (api.QueueOut, pb.Queue),
    (api.QueueList, pb.QueueList),
    (api.UnitOut, pb.Unit),
    (api.PoolOut, pb.Pool),
    (api.PoolList, pb.PoolList),
    (api.EventItem, pb.Event),
    (api.EventList, pb.EventList),
    (api.WhoAmI, pb.WhoAmIResponse),
    (api.Health, pb.HealthResponse),
    (api.TelemetrySample, pb.TelemetrySample),
    (api.TelemetryOut, pb.Telemetry),
    (api.UsageRow, pb.UsageRow),
    (api.UsageOut, pb.Usage),
    (api.AuditOut, pb.AuditEntry),
    (api.AuditList, pb.AuditList),
    (steps.StepTaskOut, pb.StepTask),
    (steps.StepOut, pb.Step),
    (steps.StepList, pb.StepList),
]


def _nullable(annotation: object) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


@pytest.mark.parametrize(("model", "message"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_every_rest_field_has_a_message_field_of_the_same_name(
    model: type[BaseModel], message: type
) -> None:
    fields = message.DESCRIPTOR.fields_by_name
    assert set(model.model_fields) == set(fields)
    for name, info in model.model_fields.items():
        field = fields[name]
        if field.is_repeated or field.message_type is not None:
            continue
        assert field.has_presence == _nullable(info.annotation), name  # optional: nullable


def test_a_job_survives_the_trip_exactly() -> None:
    job = api.JobOut(
        id=2**62,
        name=None,
        user="u",
        queue="q",
        state="running",
        priority=-3,
        priority_class=None,
        preemptible=True,
        attempt=1,
        nodes=2,
        tasks_per_node=8,
        gpus="H100:8",
        total_gpus=16.0,
        reason=None,
        position=None,
        submitted_at=1.5,
        started_at=2.25,
        ended_at=None,
        exit_code=0,
        manifest={"command": ["x"], "resources": {"cpus": 4.0, "gpus": 8}, "env": {"A": "1"}},
        array=api.ArrayOut(job_id=7, spec="0-3", tasks="0-3", count=4, states={"pending": 4}),
        tasks=[api.TaskOut(rank=0, node="n", node_rank=0, local_rank=0, gpus=[0, 1], state="x")],
    )
    back = api.JobOut.model_validate(to_dict(to_message(job.model_dump(mode="json"), pb.Job)))
    assert back == job
    assert back.model_dump_json() == job.model_dump_json()  # 4.0 stays 4.0, 8 stays 8


@pytest.mark.parametrize("command", [["orted", "-x", ""], "echo 'a b' | wc -c"])
def test_a_steps_command_survives_the_trip_as_a_list_or_a_string(command: list[str] | str) -> None:
    step = steps.StepOut(
        job_id=2**62,
        attempt=1,
        step=3,
        command=command,
        state="ended",
        created_at=1.5,
        created_by="job:7",
        cancelled=False,
        exit_code=None,
        tasks=[steps.StepTaskOut(rank=0, node="n", local_rank=0, state="exited", exit_code=0)],
    )
    back = steps.StepOut.model_validate(to_dict(to_message(step.model_dump(mode="json"), pb.Step)))
    assert back == step and back.command == command


@pytest.mark.parametrize(
    "error",
    [cls("m") for cls in errors.ERRORS_BY_CODE.values()],
    ids=list(errors.ERRORS_BY_CODE),
)
def test_errors_map_to_status_codes_and_back(error: errors.CorralError) -> None:
    code = status_of(error)
    again = error_of(code, "m", {CODE_KEY: error.code})
    assert type(again) is type(error) and again.message == "m"
    expected = {
        errors.ValidationError: grpc.StatusCode.INVALID_ARGUMENT,
        errors.NotFoundError: grpc.StatusCode.NOT_FOUND,
        errors.AuthenticationError: grpc.StatusCode.UNAUTHENTICATED,
        errors.PermissionDeniedError: grpc.StatusCode.PERMISSION_DENIED,
        errors.ConflictError: grpc.StatusCode.FAILED_PRECONDITION,
        errors.LimitExceededError: grpc.StatusCode.RESOURCE_EXHAUSTED,
        errors.PayloadTooLargeError: grpc.StatusCode.RESOURCE_EXHAUSTED,
        errors.UnavailableError: grpc.StatusCode.UNAVAILABLE,
    }
    for cls, status in expected.items():
        if isinstance(error, cls):
            assert code == status
            break
    else:
        assert code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE)


def test_regenerating_gives_the_checked_in_modules(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    checked_in = Path(generate.__file__).parent / "v1"
    header = (checked_in / "corral_pb2.py").read_text().splitlines()[4]
    written = generate.generate(tmp_path)
    new_header = written[0].read_text().splitlines()[4]
    if new_header != header:  # another protoc writes other (equivalent) code
        pytest.skip(f"grpcio-tools generates for {new_header!r}, the files for {header!r}")
    for path in written:
        assert filecmp.cmp(path, checked_in / path.name, shallow=False), (
            f"{path.name} differs from the checked-in file: run python -m corral.api.generate"
        )
