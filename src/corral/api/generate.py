"""Regenerate the checked-in gRPC modules from ``v1/corral.proto``.

``python -m corral.api.generate [OUT]`` (needs ``grpcio-tools``, in the test extra)
writes ``corral_pb2.py``, ``corral_pb2.pyi`` and ``corral_pb2_grpc.py`` next to the
``.proto`` (or under ``OUT``, as ``OUT/corral/api/v1/...``). The output depends only on
the ``.proto`` and the grpcio-tools version, so regenerating is reproducible
(``tests/unit/test_grpc_generated.py`` checks it)."""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = "corral/api/v1/corral.proto"
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding ``corral/``
GENERATED = ("corral_pb2.py", "corral_pb2.pyi", "corral_pb2_grpc.py")


def generate(out: Path = SOURCE_ROOT) -> list[Path]:
    """Run protoc on the ``.proto``; returns the files written."""
    from importlib.resources import files

    from grpc_tools import protoc

    well_known = str(files("grpc_tools") / "_proto")
    (out / PROTO).parent.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SOURCE_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        str(SOURCE_ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")
    return [out / Path(PROTO).parent / name for name in GENERATED]


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE_ROOT):
        print(path)
