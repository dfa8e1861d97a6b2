"""GPU telemetry: the simulated load contract, generated readings, and NVML parsing
against a fake ``pynvml`` module (there is no GPU here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from corral.agent.telemetry import (
    DEFAULT_BUSY_UTILIZATION,
    LoadFiles,
    NvmlTelemetry,
    SimLoad,
    parse_load,
    read_faults,
    simulated_sample,
)
from corral.schemas.agent import DeviceIn

GB = 10**9


@pytest.mark.parametrize(
    ("text", "load"),
    [
        ('{"utilization": 73}', SimLoad(73.0, None)),
        ('{"utilization": 73, "memory_used": 1000}', SimLoad(73.0, 1000)),
        ('{"memory_used": "20GB"}', SimLoad(None, 20 * GB)),
        ('{"utilization": 150}', SimLoad(100.0, None)),
        ('{"utilization": -3}', SimLoad(0.0, None)),
        ("{}", SimLoad()),
    ],
)
def test_parse_load(text: str, load: SimLoad) -> None:
    assert parse_load(text) == load


@pytest.mark.parametrize(
    "text",
    [
        "",
        "73",
        '{"utilization": "busy"}',
        '{"utilization": true}',
        "[1]",
        '{"memory_used": "lots"}',
    ],
)
def test_parse_load_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_load(text)


def test_load_files_keep_the_last_readable_content(tmp_path: Path) -> None:
    path = tmp_path / "load.json"
    files = LoadFiles()
    assert files.read(path) == SimLoad()  # not written yet: the task said nothing
    path.write_text('{"utilization": 40}')
    assert files.read(path) == SimLoad(40.0, None)
    path.write_text('{"utiliz')  # half-written
    assert files.read(path) == SimLoad(40.0, None)
    files.forget(path)
    assert files.read(path) == SimLoad()


def _devices(n: int = 4, model: str = "H100") -> list[DeviceIn]:
    return [DeviceIn(index=i, model=model, memory=80 * GB) for i in range(n)]


def test_simulated_readings_follow_the_tasks_loads() -> None:
    holders = {
        0: [SimLoad(73.0, 20 * GB)],  # the task set its load
        1: [SimLoad()],  # a task that said nothing: busy by default
        2: [SimLoad(60.0, 50 * GB), SimLoad(70.0, 50 * GB)],  # shared: capped at the GPU
    }
    readings = {r.index: r for r in simulated_sample(_devices(), holders)}
    assert (readings[0].utilization, readings[0].memory_used) == (73.0, 20 * GB)
    assert readings[1].utilization == DEFAULT_BUSY_UTILIZATION
    assert readings[1].memory_used == 40 * GB
    assert (readings[2].utilization, readings[2].memory_used) == (100.0, 80 * GB)
    idle = readings[3]
    assert (idle.utilization, idle.memory_used, idle.memory_total) == (0.0, 0, 80 * GB)
    assert idle.temperature == 32.0 and idle.power == 70.0
    assert readings[2].temperature == 82.0 and readings[2].power == 700.0  # H100 board power
    assert all(r.ecc_errors == r.xid_errors == 0 for r in readings.values())
    assert simulated_sample(_devices(), holders) == list(readings.values())  # deterministic


def test_simulated_faults_from_the_agents_file(tmp_path: Path) -> None:
    path = tmp_path / "sim-faults.json"
    assert read_faults(path) == {}
    path.write_text('{"2": {"ecc_errors": 1, "xid_errors": 3, "xid": 79}, "x": 1}')
    faults = read_faults(path)
    assert faults == {2: {"ecc_errors": 1, "xid_errors": 3, "xid": 79}}
    reading = simulated_sample(_devices(), {}, faults)[2]
    assert (reading.ecc_errors, reading.xid_errors, reading.last_xid) == (1, 3, 79)


def test_tpu_chips_have_no_gpu_readings() -> None:
    chips = [DeviceIn(index=0, model="v5p", memory=95 * GB, kind="tpu")]
    assert simulated_sample(chips, {0: [SimLoad(50.0)]}) == []


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801 (pynvml's name)
    pass


class FakeNvml:
    """The slice of pynvml that telemetry uses, over a table of GPUs."""

    NVMLError = NVMLError
    NVMLError_Timeout = NVMLError_Timeout
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[dict[str, Any]], init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.events: list[SimpleNamespace] = []
        self.registered: list[int] = []
        self.shut_down = False

    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_fails:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return handle

    def _field(self, handle: int, name: str) -> Any:
        value = self.gpus[handle][name]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=self._field(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=self._field(h, "used"), total=self._field(h, "total"), free=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._field(h, "temp")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        return self._field(h, "mw")

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:  # noqa: N802
        assert (kind, counter) == (1, 0)
        return self._field(h, "ecc")

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "set"

    def nvmlEventSetFree(self, _set: str) -> None:  # noqa: N802
        pass

    def nvmlDeviceRegisterEvents(self, h: int, types: int, _set: str) -> None:  # noqa: N802
        assert types == self.nvmlEventTypeXidCriticalError
        if self.gpus[h].get("events_unsupported"):
            raise NVMLError("Not Supported")
        self.registered.append(h)

    def nvmlEventSetWait(self, _set: str, timeout_ms: int) -> SimpleNamespace:  # noqa: N802
        assert timeout_ms == 0  # never blocks the sync
        if not self.events:
            raise NVMLError_Timeout("Timeout")
        return self.events.pop(0)


def _gpu(**overrides: Any) -> dict[str, Any]:
    return {
        "util": 55,
        "used": 30 * GB,
        "total": 80 * GB,
        "temp": 61,
        "mw": 412_500,
        "ecc": 0,
        **overrides,
    }


def test_nvml_readings_and_xid_events() -> None:
    nvml = FakeNvml([_gpu(), _gpu(util=0, ecc=2)])
    telemetry = NvmlTelemetry(nvml)  # type: ignore[arg-type]
    assert telemetry.open()
    assert nvml.registered == [0, 1]
    first = telemetry.sample()
    assert [(r.index, r.utilization, r.memory_used, r.memory_total) for r in first] == [
        (0, 55.0, 30 * GB, 80 * GB),
        (1, 0.0, 30 * GB, 80 * GB),
    ]
    assert (first[0].temperature, first[0].power) == (61.0, 412.5)  # milliwatts -> watts
    assert [r.ecc_errors for r in first] == [0, 2]
    assert [r.xid_errors for r in first] == [0, 0]
    nvml.events += [
        SimpleNamespace(device=1, eventType=8, eventData=79),
        SimpleNamespace(device=1, eventType=8, eventData=48),
    ]
    second = telemetry.sample()
    assert (second[1].xid_errors, second[1].last_xid) == (2, 48)  # counted, latest code kept
    assert telemetry.sample()[1].xid_errors == 2  # a counter: it does not go back
    telemetry.close()
    assert nvml.shut_down


def test_nvml_missing_readings_are_unknown_and_unreadable_gpus_left_out() -> None:
    nvml = FakeNvml(
        [
            _gpu(
                temp=NVMLError("Not Supported"), mw=NVMLError("Not Supported"), ecc=NVMLError("x")
            ),
            _gpu(util=NVMLError("GPU is lost")),
            _gpu(events_unsupported=True),
        ]
    )
    telemetry = NvmlTelemetry(nvml)  # type: ignore[arg-type]
    assert telemetry.open()
    readings = telemetry.sample()
    assert [r.index for r in readings] == [0, 2]
    assert (readings[0].temperature, readings[0].power, readings[0].ecc_errors) == (None, None, 0)
    assert nvml.registered == [0, 1]


def test_nvml_not_usable() -> None:
    telemetry = NvmlTelemetry(FakeNvml([_gpu()], init_fails=True))  # type: ignore[arg-type]
    assert not telemetry.open()
    assert telemetry.sample() == []
