"""Job kinds: built-ins, plugins from the ``corral.kinds`` entry points, duplicates."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.kinds.registry import get_kind, kinds
from corral.schemas.manifest import parse_manifest

PLUGIN = """
from corral.kinds.base import Launch, check_keys


class HorovodKind:
    name = "horovod"
    summary = "Horovod's environment"

    def options(self, block):
        check_keys(self.name, block, {"cycle_time_ms": int})
        return {"cycle_time_ms": 5, **block}

    def expand(self, spec):
        return spec

    def launch(self, task):
        cycle = str(task.options()["cycle_time_ms"])
        return Launch(task.role.command, {"HOROVOD_CYCLE_TIME": cycle})


class Impostor(HorovodKind):
    name = "pytorch"
"""


def install_plugin(root: Path, name: str, target: str) -> None:
    """A distribution with one ``corral.kinds`` entry point, importable from ``root``."""
    (root / "corral_horovod.py").write_text(PLUGIN)
    info = root / f"corral_{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: corral-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[corral.kinds]\n{name} = corral_horovod:{target}\n")


@pytest.fixture
def plugin_path(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    kinds.cache_clear()
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("corral_horovod", None)
        kinds.cache_clear()


def test_builtin_kinds() -> None:
    assert {"pytorch", "jax", "tpu"} <= set(kinds())
    with pytest.raises(ValueError, match="unknown kind 'spark'; known kinds: .*pytorch"):
        get_kind("spark")


def test_a_plugin_kind_is_found_through_its_entry_point(plugin_path: Path) -> None:
    install_plugin(plugin_path, "horovod", "HorovodKind")
    assert get_kind("horovod").summary == "Horovod's environment"
    manifest = parse_manifest({"command": "x", "kind": "horovod", "horovod": {"cycle_time_ms": 7}})
    assert manifest.to_spec().kind == "horovod"
    assert manifest.model_dump(mode="json", exclude_none=True)["horovod"] == {"cycle_time_ms": 7}
    again = parse_manifest(manifest.model_dump(mode="json", exclude_none=True))
    assert again.to_spec() == manifest.to_spec()  # stored and read back: the same job


def test_a_plugin_may_not_take_a_builtin_name(plugin_path: Path) -> None:
    install_plugin(plugin_path, "impostor", "Impostor")
    with pytest.raises(ValueError, match="job kind 'pytorch' from corral_horovod:Impostor is "):
        kinds()
