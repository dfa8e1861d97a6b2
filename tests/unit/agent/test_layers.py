"""Unpacking image layers: whiteouts, opaque directories, links, refused members, digests,
compression, the size limit and what is stripped from modes."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from corral.agent.layers import LayerError, Unpacked, apply_layer
from tests.imagebuild import digest, entry, tar_entries

D, F, L, H = tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE


def unpack(root: Path, *layers: bytes, limit: int | None = None) -> Unpacked:
    root.mkdir(exist_ok=True)
    unpacked = Unpacked(str(root), limit=limit)
    for layer in layers:
        apply_layer(unpacked, io.BytesIO(layer))
    unpacked.finish()
    return unpacked


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root``: file contents, ``->target`` for links, ``/`` for dirs."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "->" + os.readlink(path)
        elif path.is_dir():
            found[rel] = "/"
        else:
            found[rel] = path.read_text()
    return found


BASE = tar_entries(
    [
        entry("etc", D),
        entry("etc/os-release", data=b"base"),
        entry("etc/gone", data=b"old"),
        entry("opt", D),
        entry("opt/app", D),
        entry("opt/app/lib.py", data=b"v1"),
        entry("opt/app/data", D),
        entry("opt/app/data/big", data=b"x"),
        entry("usr", D),
        entry("usr/lib", D),
        entry("lib", L, linkname="usr/lib"),
    ]
)


def test_whiteouts_and_opaque_directories_hide_what_lower_layers_put(tmp_path: Path) -> None:
    upper = tar_entries(
        [
            entry("etc/.wh.gone"),  # delete a file below
            entry("opt/app", D),
            entry("opt/app/.wh..wh..opq"),  # hide everything below in opt/app ...
            entry("opt/app/lib.py", data=b"v2"),  # ... but this layer's own entries stay
            entry("lib/libfoo.so", data=b"elf"),  # through a link: lands in usr/lib
            entry("etc/.wh.never-there"),
        ]
    )
    unpack(tmp_path / "root", BASE, upper)
    assert tree(tmp_path / "root") == {
        "etc": "/",
        "etc/os-release": "base",
        "lib": "->usr/lib",
        "opt": "/",
        "opt/app": "/",
        "opt/app/lib.py": "v2",
        "usr": "/",
        "usr/lib": "/",
        "usr/lib/libfoo.so": "elf",
    }


def test_an_opaque_marker_before_the_layers_own_entries_keeps_them(tmp_path: Path) -> None:
    upper = tar_entries(
        [
            entry("opt/app/.wh..wh..opq"),
            entry("opt/app/data", D),
            entry("opt/app/data/new", data=b"n"),
        ]
    )
    unpack(tmp_path / "root", BASE, upper)
    found = tree(tmp_path / "root")
    assert found["opt/app/data/new"] == "n"
    assert "opt/app/lib.py" not in found and "opt/app/data/big" not in found


def test_entries_replace_other_types_and_hard_links_share_a_file(tmp_path: Path) -> None:
    upper = tar_entries(
        [
            entry("opt/app", data=b"now a file"),  # a directory below becomes a file
            entry("etc/os-release", D),  # and a file a directory
            entry("usr/bin", D),
            entry("usr/bin/tool", data=b"#!/bin/sh"),
            entry("usr/bin/alias", H, linkname="usr/bin/tool"),
            entry("usr/bin/rel", L, linkname="../lib"),
            entry("usr/bin/abs", L, linkname="/etc/passwd"),  # read in the container
        ]
    )
    unpack(tmp_path / "root", BASE, upper)
    root = tmp_path / "root"
    assert (root / "opt/app").read_text() == "now a file"
    assert (root / "etc/os-release").is_dir()
    assert os.stat(root / "usr/bin/alias").st_ino == os.stat(root / "usr/bin/tool").st_ino
    assert os.readlink(root / "usr/bin/abs") == "/etc/passwd"


def test_a_link_to_an_absolute_path_is_followed_inside_the_image(tmp_path: Path) -> None:
    """A directory link to ``/`` must not lead the unpacker onto the host."""
    outside = tmp_path / "host-etc"
    outside.mkdir()
    first = tar_entries([entry("evil", L, linkname=str(outside))])
    second = tar_entries([entry("evil/planted", data=b"gotcha")])
    unpack(tmp_path / "root", first, second)
    assert not (outside / "planted").exists()
    # it went where the link leads in the container: <root>/<outside path>
    assert (tmp_path / "root" / str(outside).lstrip("/") / "planted").read_text() == "gotcha"


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (entry("/etc/passwd", data=b"x"), "absolute path"),
        (entry("../outside", data=b"x"), "'..'"),
        (entry("a/../../outside", data=b"x"), "'..'"),
        (entry("usr/lib/x", L, linkname="../../../etc/shadow"), "symbolic link out of"),
        (entry("hard", H, linkname="../../etc/shadow"), "hard link out of"),
        (entry("hard", H, linkname="/etc/shadow"), "hard link out of"),
        (entry("hard", H, linkname="not/there"), "not in the image"),
        (entry("hard", H, linkname="usr"), "not a file"),
        (entry("usr/sda", tarfile.BLKTYPE, devmajor=8, devminor=0), "device node"),
        (entry("null", tarfile.CHRTYPE, devmajor=1, devminor=3), "device node"),
        (entry("etc/os-release/x", data=b"x"), "not a directory"),
    ],
)
def test_unsafe_members_refuse_the_image(tmp_path: Path, member: tuple, problem: str) -> None:
    with pytest.raises(LayerError, match=problem):
        unpack(tmp_path / "root", BASE, tar_entries([member]))


def test_device_nodes_in_dev_are_skipped(tmp_path: Path) -> None:
    layer = tar_entries(
        [
            entry("dev", D),
            entry("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3),
            entry("dev/fifo", tarfile.FIFOTYPE),
        ]
    )
    unpack(tmp_path / "root", layer)
    assert not (tmp_path / "root/dev/null").exists()
    assert stat.S_ISFIFO(os.lstat(tmp_path / "root/dev/fifo").st_mode)


def test_owners_and_dangerous_modes_are_not_kept(tmp_path: Path) -> None:
    layer = tar_entries(
        [
            entry("bin", D, mode=0o777),
            entry("bin/su", data=b"elf", mode=0o4755, uid=1234, gid=1234),
            entry("bin/shared", data=b"w", mode=0o666),
            entry("locked", D, mode=0o500),
            entry("locked/inside", data=b"later"),  # written although its dir is read-only
        ]
    )
    unpack(tmp_path / "root", layer)
    root = tmp_path / "root"
    assert stat.S_IMODE(os.stat(root / "bin/su").st_mode) == 0o755
    assert os.stat(root / "bin/su").st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(root / "bin/shared").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(root / "bin").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "locked").st_mode) == 0o700
    assert (root / "locked/inside").read_text() == "later"
    assert os.stat(root / "bin/su").st_mtime == 1_700_000_000


def test_layers_are_checked_against_their_digests(tmp_path: Path) -> None:
    layer = tar_entries([entry("a", data=b"a")])
    blob = gzip.compress(layer)
    unpacked = Unpacked(str(tmp_path))
    apply_layer(unpacked, io.BytesIO(blob), digest=digest(blob), diff_id=digest(layer))
    with pytest.raises(LayerError, match="its bytes hash to"):
        apply_layer(Unpacked(str(tmp_path)), io.BytesIO(blob), digest=digest(b"other"))
    with pytest.raises(LayerError, match="its tar hashes to"):
        apply_layer(Unpacked(str(tmp_path)), io.BytesIO(blob), diff_id=digest(b"other"))


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd command")
def test_zstd_layers(tmp_path: Path) -> None:
    layer = tar_entries([entry("z", data=b"zstd")])
    blob = subprocess.run(["zstd", "-q", "-c"], input=layer, capture_output=True).stdout
    unpacked = Unpacked(str(tmp_path / "r"))
    (tmp_path / "r").mkdir()
    apply_layer(unpacked, io.BytesIO(blob), digest=digest(blob), diff_id=digest(layer))
    assert (tmp_path / "r/z").read_text() == "zstd"
    with pytest.raises(LayerError, match="not a valid"):
        apply_layer(unpacked, io.BytesIO(blob[:20]))


def test_not_a_layer(tmp_path: Path) -> None:
    with pytest.raises(LayerError, match="not a valid layer"):
        unpack(tmp_path / "root", b"\x1f\x8bnot gzip at all")
    with pytest.raises(LayerError, match="not a valid layer"):
        unpack(tmp_path / "root", b"plain garbage" * 100)


def test_the_size_limit(tmp_path: Path) -> None:
    layer = tar_entries([entry("big", data=b"x" * 100_000)])
    with pytest.raises(LayerError, match="more than the image cache's limit"):
        unpack(tmp_path / "root", layer, limit=50_000)
    assert unpack(tmp_path / "ok", layer, limit=200_000).size >= 100_000
