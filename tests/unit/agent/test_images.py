"""The node's image cache: the image forms, keying by digest, one unpack for concurrent
tasks, failures that leave nothing behind, LRU eviction sparing images in use, and images
read with the job account's permissions."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import platform
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from corral.agent.identity import Account, lookup_account
from corral.agent.images import Image, ImageCache, ImageError
from tests.imagebuild import (
    D,
    archive_of,
    digest,
    docker_archive,
    entry,
    oci_archive,
    oci_layout,
    tar_entries,
)

LAYERS = [
    tar_entries([entry("etc", D), entry("etc/os-release", data=b"test"), entry("bin", D)]),
    tar_entries([entry("bin/tool", data=b"#!/bin/sh\necho hi\n", mode=0o755)]),
]
ROOT = os.geteuid() == 0


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "/" if p.is_dir() else p.read_text()
        for p in sorted(root.rglob("*"))
    }


def test_the_image_forms_unpack_alike_keyed_by_digest(tmp_path: Path) -> None:
    cache = ImageCache(tmp_path / "cache", node="n1")
    layout_key = oci_layout(tmp_path / "layout", LAYERS, env=["A=1"], workdir="/bin")
    archive_key = oci_archive(tmp_path / "img.tar", LAYERS, env=["A=1"], workdir="/bin")
    docker_key = docker_archive(tmp_path / "docker.tar", LAYERS)
    assert layout_key == archive_key  # the same image, whatever carries it
    images = [
        cache.acquire(f"oci:{tmp_path}/layout", None),
        cache.acquire(f"oci-archive:{tmp_path}/img.tar", None),
        cache.acquire(f"oci-archive:{tmp_path}/img.tar:latest", None),
        cache.acquire(f"docker-archive:{tmp_path}/docker.tar", None),
    ]
    assert [i.key for i in images] == [layout_key.replace(":", "-")] * 3 + [
        docker_key.replace(":", "-")
    ]
    expected = {
        "bin": "/",
        "bin/tool": "#!/bin/sh\necho hi\n",
        "etc": "/",
        "etc/os-release": "test",
    }
    assert files(images[0].root) == files(images[3].root) == expected
    assert images[0].root == images[1].root == tmp_path / "cache" / images[0].key / "rootfs"
    assert images[0].config == {"Env": ["A=1"], "WorkingDir": "/bin"}
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        {".locks", images[0].key, images[3].key}
    )
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o711"
    for image in images:
        cache.release(image)


def test_a_directory_image_is_used_in_place(tmp_path: Path) -> None:
    (tmp_path / "rootfs").mkdir()
    image = ImageCache(tmp_path / "cache").acquire(str(tmp_path / "rootfs"), None)
    assert image.root == tmp_path / "rootfs" and image.key is None and image.lease is None
    assert not (tmp_path / "cache").exists()


def test_concurrent_tasks_of_one_image_unpack_it_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    big = tar_entries([entry(f"f{i}", data=os.urandom(50_000)) for i in range(40)])
    oci_archive(tmp_path / "img.tar", [big, *LAYERS])
    cache = ImageCache(tmp_path / "cache")
    got, errors = [], []

    def use() -> None:
        try:
            got.append(cache.acquire(f"oci-archive:{tmp_path}/img.tar", None))
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    caplog.set_level(logging.INFO, logger="corral.agent.images")
    threads = [threading.Thread(target=use) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len({i.root for i in got}) == 1 and len({i.lease for i in got}) == 6
    assert sum("unpacked" in r.getMessage() for r in caplog.records) == 1
    for image in got:
        cache.release(image)


def test_an_unpack_never_waits_for_the_leases_of_running_tasks(tmp_path: Path) -> None:
    """A task that took its lease while the image was being unpacked keeps it while it runs;
    the next task of that image, had it also come before the unpack ended, must not wait
    for the first task to end (which an unpack holding the lease lock exclusively did)."""
    oci_archive(tmp_path / "img.tar", LAYERS)
    cache = ImageCache(tmp_path / "cache")
    first = cache.acquire(f"oci-archive:{tmp_path}/img.tar", None)
    key = first.key
    assert key is not None
    cache.evict()  # nothing: it is in use
    cache.release(first)
    cache.limit = 0
    assert cache.evict() == [key]  # uncached again, as before the first task came
    running = cache._lock_file(key)  # a running task's lease, from before the unpack
    fcntl.flock(running, fcntl.LOCK_SH)
    got: list[object] = []
    cache.limit = 10**9
    worker = threading.Thread(
        target=lambda: got.append(cache.acquire(f"oci-archive:{tmp_path}/img.tar", None)),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=120)  # a hang detector, not a performance limit
    os.close(running)
    assert not worker.is_alive(), "the unpack waited for a running task's lease"
    (image,) = got
    assert isinstance(image, Image) and files(image.root)["bin/tool"].startswith("#!")
    cache.release(image)


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        (
            "oci-archive:{tmp}/missing.tar",
            "image oci-archive:{tmp}/missing.tar: not found on node n1",
        ),
        ("oci-archive:{tmp}/garbage.tar", "not a tar archive"),
        ("oci-archive:{tmp}/docker.tar", "not an OCI archive: no index.json in it"),
        ("docker-archive:{tmp}/img.tar", "not a docker-archive: no manifest.json in it"),
        ("oci:{tmp}/missing", "not found on node n1"),
        ("oci:{tmp}/img.tar", "Not a directory"),
        ("oci-archive:{tmp}/img.tar:v9", "no image named 'v9' in it"),
        ("{tmp}/missing-rootfs", "no such directory on node n1"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "cannot pull it on node n1"),
        ("oci:relative", "absolute path"),
    ],
)
def test_problems_name_the_image(tmp_path: Path, image: str, problem: str) -> None:
    oci_archive(tmp_path / "img.tar", LAYERS)
    docker_archive(tmp_path / "docker.tar", LAYERS)
    (tmp_path / "garbage.tar").write_bytes(b"\x00garbage" * 200)
    text = image.format(tmp=tmp_path)
    with pytest.raises(ImageError, match=problem.format(tmp=tmp_path)) as caught:
        ImageCache(tmp_path / "cache", node="n1").acquire(text, None)
    assert str(caught.value).startswith(f"image {text}: ")


def test_a_tampered_image_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    oci_layout(tmp_path / "layout", LAYERS)
    manifest = json.loads(
        (tmp_path / "layout/blobs/sha256" / _manifest_hex(tmp_path / "layout")).read_text()
    )
    layer = tmp_path / "layout/blobs/sha256" / manifest["layers"][1]["digest"][7:]
    layer.write_bytes(layer.read_bytes()[:-8] + b"tampered")  # a cache poisoner's attempt
    cache = ImageCache(tmp_path / "cache")
    with pytest.raises(ImageError, match="hash|not a valid layer"):
        cache.acquire(f"oci:{tmp_path}/layout", None)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".locks"]
    # a manifest that does not match its name is refused before anything is unpacked
    (tmp_path / "layout/blobs/sha256" / _manifest_hex(tmp_path / "layout")).write_text("{}")
    with pytest.raises(ImageError, match="does not match its digest"):
        cache.acquire(f"oci:{tmp_path}/layout", None)


def _manifest_hex(layout: Path) -> str:
    return json.loads((layout / "index.json").read_text())["manifests"][0]["digest"][7:]


def test_leftovers_of_an_interrupted_unpack_are_removed(tmp_path: Path) -> None:
    key = oci_archive(tmp_path / "img.tar", LAYERS).replace(":", "-")
    stale = tmp_path / "cache" / f".tmp-{key}-dead"
    (stale / "rootfs").mkdir(parents=True)
    cache = ImageCache(tmp_path / "cache")
    cache.release(cache.acquire(f"oci-archive:{tmp_path}/img.tar", None))
    assert not stale.exists() and (tmp_path / "cache" / key / "rootfs/bin/tool").exists()


def test_least_recently_used_images_no_task_uses_are_evicted(tmp_path: Path) -> None:
    def make(name: str) -> str:
        layer = tar_entries([entry(name, data=os.urandom(100_000))])
        oci_archive(tmp_path / f"{name}.tar", [layer])
        return f"oci-archive:{tmp_path}/{name}.tar"

    cache = ImageCache(tmp_path / "cache", limit=250_000)
    first, second, third, fourth = (make(n) for n in "abcd")
    a = cache.acquire(first, None)
    cache.release(a)
    b = cache.acquire(second, None)  # still in use (its lease is held)
    for index, key in enumerate([a.key, b.key]):  # a used before b
        os.utime(tmp_path / "cache" / str(key) / "image.json", (1000 + index, 1000 + index))
    c = cache.acquire(third, None)  # 300 KB > 250 KB: a goes, not b (in use) nor c
    assert [e.key for e in cache.entries()] == [b.key, c.key]
    cache.release(c)
    cache.release(b)
    d = cache.acquire(fourth, None)  # now b (least recently used) goes
    assert {e.key for e in cache.entries()} == {c.key, d.key}
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "cache").iterdir())
    assert cache.lease(str(b.key)) is None
    lease = cache.lease(str(c.key))  # a re-adopted task's
    assert lease is not None
    os.close(lease)


def test_an_image_larger_than_the_cache_is_refused(tmp_path: Path) -> None:
    oci_archive(tmp_path / "big.tar", [tar_entries([entry("big", data=b"x" * 300_000)])])
    with pytest.raises(ImageError, match="more than the image cache's limit"):
        ImageCache(tmp_path / "cache", limit=100_000).acquire(
            f"oci-archive:{tmp_path}/big.tar", None
        )


def test_one_image_of_several_by_name_or_platform(tmp_path: Path) -> None:
    oci_layout(tmp_path / "a", LAYERS[:1], tag="one")
    oci_layout(tmp_path / "b", LAYERS, tag="two")
    merged = tmp_path / "both"
    shutil.copytree(tmp_path / "a", merged)
    shutil.copytree(tmp_path / "b", merged, dirs_exist_ok=True)
    index = [json.loads((tmp_path / n / "index.json").read_text())["manifests"][0] for n in "ab"]
    (merged / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": index}))
    cache = ImageCache(tmp_path / "cache")
    assert not (cache.acquire(f"oci:{merged}:one", None).root / "bin/tool").exists()
    assert (cache.acquire(f"oci:{merged}:two", None).root / "bin/tool").exists()
    with pytest.raises(ImageError, match="holds 2 images: name one .* of one, two"):
        cache.acquire(f"oci:{merged}", None)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    index[0]["platform"], index[1]["platform"] = (
        {"architecture": "s390x", "os": "linux"},
        {
            "architecture": arch,
            "os": "linux",
        },
    )
    (merged / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": index}))
    assert (cache.acquire(f"oci:{merged}", None).root / "bin/tool").exists()
    archive_of(merged, tmp_path / "both.tar")
    assert cache.acquire(f"oci-archive:{tmp_path}/both.tar", None).key == digest(
        (merged / "blobs/sha256" / index[1]["digest"][7:]).read_bytes()
    ).replace(":", "-")


@pytest.mark.skipif(not ROOT, reason="needs root (an agent reading for another account)")
def test_images_are_read_with_the_job_accounts_permissions() -> None:
    nobody = lookup_account("nobody")
    with tempfile.TemporaryDirectory(dir="/tmp") as top:  # (reachable by nobody)
        os.chmod(top, 0o755)
        _read_as_nobody(Path(top), nobody)


def _read_as_nobody(tmp_path: Path, nobody: Account) -> None:
    oci_archive(tmp_path / "private.tar", LAYERS)
    os.chmod(tmp_path / "private.tar", 0o600)  # root's alone
    cache = ImageCache(tmp_path / "cache", node="n1")
    with pytest.raises(ImageError, match="nobody may not read: .*private.tar"):
        cache.acquire(f"oci-archive:{tmp_path}/private.tar", nobody)
    # a link does not help: it is followed as the account would
    (tmp_path / "link.tar").symlink_to(tmp_path / "private.tar")
    with pytest.raises(ImageError, match="nobody may not read"):
        cache.acquire(f"oci-archive:{tmp_path}/link.tar", nobody)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    oci_layout(locked / "layout", LAYERS)
    with pytest.raises(ImageError, match="nobody may not search"):
        cache.acquire(f"oci:{locked}/layout", nobody)
    with pytest.raises(ImageError, match="nobody may not read the directory"):
        cache.acquire(str(locked), nobody)
    os.chmod(tmp_path / "private.tar", 0o644)
    image = cache.acquire(f"oci-archive:{tmp_path}/link.tar", nobody)
    assert (image.root / "bin/tool").exists()
    assert cache.entries() and not (tmp_path / "cache" / "x").exists()
