"""Per-GPU telemetry: NVML readings on real GPUs, generated readings on simulated ones.

**Simulated load (the task sets it).** On a simulated node the agent gives every task
``CORRAL_SIM_LOAD_FILE``, a path the task may write at any time. Its content is JSON::

    {"utilization": 73, "memory_used": "20GB"}

``utilization`` is the duty cycle in percent (0-100) of each GPU the task holds;
``memory_used`` is bytes per GPU (a number or a size such as ``"20GB"``). Either key may
be left out. A task that never writes the file (or writes something unreadable) counts as
busy: :data:`DEFAULT_BUSY_UTILIZATION` percent and :data:`DEFAULT_BUSY_MEMORY_FRACTION` of
each GPU's memory. An unreadable file keeps the last readable content. GPUs that hold no
task read 0% and 0 bytes. Tasks sharing a GPU add up (capped at 100% and the GPU's memory).
Write the file atomically (write a temporary file, then rename) to never be read half-way.

**Simulated faults (admins and tests).** The simulated provider reads ``sim-faults.json``
in the agent's home (``$CORRAL_HOME/agents/<node>/sim-faults.json``) at every sample::

    {"3": {"ecc_errors": 1, "xid_errors": 1, "xid": 79}}

GPU index -> the counters that GPU reports (uncorrectable ECC errors, critical Xid events
and the code of the latest). Deleting the file sets them back to 0.

Temperature and power of a simulated GPU follow its utilization: from 32 C and
:data:`IDLE_POWER_W` when idle to 82 C and the model's board power at 100%.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from corral.core.units import parse_size
from corral.schemas.agent import DeviceIn, GpuTelemetry

SIM_LOAD_ENV = "CORRAL_SIM_LOAD_FILE"
FAULTS_FILE = "sim-faults.json"
DEFAULT_BUSY_UTILIZATION = 90.0
DEFAULT_BUSY_MEMORY_FRACTION = 0.5
IDLE_POWER_W = 70.0
BOARD_POWER_W = {"H100": 700.0, "H200": 700.0, "B200": 1000.0, "A100": 400.0, "MI300X": 750.0}
DEFAULT_BOARD_POWER_W = 350.0


@dataclass(frozen=True)
class SimLoad:
    """What a task said about its load; None: it did not say."""

    utilization: float | None = None
    memory_used: int | None = None


def parse_load(text: str) -> SimLoad:
    """The content of a ``CORRAL_SIM_LOAD_FILE``; raises ``ValueError`` if malformed."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    utilization = data.get("utilization")
    if utilization is not None:
        if isinstance(utilization, bool) or not isinstance(utilization, int | float):
            raise ValueError("utilization: expected a number")
        utilization = min(100.0, max(0.0, float(utilization)))
    memory = data.get("memory_used")
    if memory is not None:
        memory = max(0, int(memory) if isinstance(memory, int | float) else parse_size(memory))
    return SimLoad(utilization, memory)


class LoadFiles:
    """The load files of the running tasks, read with their last readable content kept."""

    def __init__(self) -> None:
        self._last: dict[Path, SimLoad] = {}

    def read(self, path: Path) -> SimLoad:
        try:
            load = parse_load(path.read_text())
        except (OSError, ValueError):
            return self._last.get(path, SimLoad())
        self._last[path] = load
        return load

    def forget(self, path: Path) -> None:
        self._last.pop(path, None)


def board_power(model: str) -> float:
    """The board power of a GPU model (first ``-`` token, upper-cased), in watts."""
    return BOARD_POWER_W.get(model.split("-", 1)[0].upper(), DEFAULT_BOARD_POWER_W)


def read_faults(path: Path) -> dict[int, dict[str, int]]:
    """The simulated fault counters by GPU index; {} if the file is absent or malformed."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    faults: dict[int, dict[str, int]] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                faults[int(key)] = {k: int(v) for k, v in value.items()}
    return faults


def simulated_sample(
    devices: Sequence[DeviceIn],
    holders: Mapping[int, Sequence[SimLoad]],
    faults: Mapping[int, Mapping[str, int]] | None = None,
) -> list[GpuTelemetry]:
    """Readings of simulated GPUs: ``holders`` maps a GPU index to the loads of the tasks
    holding it (see the module's docstring); deterministic."""
    readings = []
    for device in devices:
        if device.kind != "gpu":
            continue
        loads = holders.get(device.index, ())
        util = sum(
            DEFAULT_BUSY_UTILIZATION if x.utilization is None else x.utilization for x in loads
        )
        memory = sum(
            int(device.memory * DEFAULT_BUSY_MEMORY_FRACTION)
            if x.memory_used is None
            else x.memory_used
            for x in loads
        )
        util = min(100.0, util)
        power = IDLE_POWER_W + util / 100 * (board_power(device.model) - IDLE_POWER_W)
        fault = (faults or {}).get(device.index, {})
        readings.append(
            GpuTelemetry(
                index=device.index,
                utilization=util,
                memory_used=min(device.memory, memory),
                memory_total=device.memory,
                temperature=round(32.0 + 0.5 * util, 1),
                power=round(power, 1),
                ecc_errors=max(0, fault.get("ecc_errors", 0)),
                xid_errors=max(0, fault.get("xid_errors", 0)),
                last_xid=fault.get("xid"),
            )
        )
    return readings


class NvmlTelemetry:
    """Readings through NVML (``pynvml``, or any module with its interface: tests pass a
    fake). NVML stays initialized between samples; critical Xid events are counted from an
    event set polled without waiting at each sample. Never raises from :meth:`sample`."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml = nvml
        self._handles: list[Any] = []
        self._events: Any = None
        self._xids: dict[int, int] = {}
        self._last_xid: dict[int, int] = {}

    def open(self) -> bool:
        """Initialize NVML; False (and no readings) when it is not usable."""
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nvml = self._nvml
            nvml.nvmlInit()
            self._handles = [
                nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
            ]
        except Exception:
            self._handles = []
            return False
        try:
            self._events = nvml.nvmlEventSetCreate()
            for handle in self._handles:
                with contextlib.suppress(nvml.NVMLError):  # not supported on this GPU
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._events
                    )
        except Exception:
            self._events = None
        return True

    def close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._handles:
            return
        with contextlib.suppress(Exception):
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
        self._handles = []

    def _drain_xids(self) -> None:
        nvml = self._nvml
        if self._events is None or nvml is None:
            return
        for _ in range(1000):  # bounded: never spin on a misbehaving driver
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # NVMLError_Timeout: no event pending
                return
            try:
                index = int(nvml.nvmlDeviceGetIndex(event.device))
            except Exception:
                continue
            self._xids[index] = self._xids.get(index, 0) + 1
            self._last_xid[index] = int(event.eventData)

    def sample(self) -> list[GpuTelemetry]:
        """One reading per GPU; a GPU whose utilization or memory cannot be read is left
        out, and a missing temperature, power or ECC count is reported as unknown or 0."""
        nvml = self._nvml
        if nvml is None or not self._handles:
            return []
        self._drain_xids()
        readings = []
        for index, handle in enumerate(self._handles):
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:
                continue
            temperature = power = None
            ecc = 0
            with contextlib.suppress(Exception):
                temperature = float(
                    nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                )
            with contextlib.suppress(Exception):
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            with contextlib.suppress(Exception):
                ecc = int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                    )
                )
            readings.append(
                GpuTelemetry(
                    index=index,
                    utilization=min(100.0, max(0.0, util)),
                    memory_used=int(memory.used),
                    memory_total=int(memory.total),
                    temperature=temperature,
                    power=power,
                    ecc_errors=ecc,
                    xid_errors=self._xids.get(index, 0),
                    last_xid=self._last_xid.get(index),
                )
            )
        return readings
