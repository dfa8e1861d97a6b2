"""Images and mounts as a manifest names them (``core.container``)."""

from __future__ import annotations

import pytest

from corral.core.container import ImageKind, Mount, check_mounts, parse_image, parse_mount


@pytest.mark.parametrize(
    ("text", "kind", "path", "tag"),
    [
        ("/images/rootfs", ImageKind.DIRECTORY, "/images/rootfs", None),
        ("oci:/images/layout", ImageKind.OCI, "/images/layout", None),
        ("oci:/images/layout:v2", ImageKind.OCI, "/images/layout", "v2"),
        ("oci-archive:/images/pytorch.tar", ImageKind.OCI_ARCHIVE, "/images/pytorch.tar", None),
        ("oci-archive:/i/p.tar:latest", ImageKind.OCI_ARCHIVE, "/i/p.tar", "latest"),
        ("docker-archive:/i/busybox.tar", ImageKind.DOCKER_ARCHIVE, "/i/busybox.tar", None),
        ("nvcr.io/nvidia/pytorch:24.01-py3", ImageKind.REGISTRY, "", None),
        ("ubuntu", ImageKind.REGISTRY, "", None),
        ("docker://ghcr.io/org/app@sha256:" + "a" * 64, ImageKind.REGISTRY, "", None),
    ],
)
def test_image_forms(text: str, kind: ImageKind, path: str, tag: str | None) -> None:
    ref = parse_image(text)
    assert (ref.kind, ref.path, ref.tag, ref.text) == (kind, path, tag, text)
    assert ref.cached == (kind in (ImageKind.OCI, ImageKind.OCI_ARCHIVE, ImageKind.DOCKER_ARCHIVE))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        (" /x", "spaces"),
        ("oci-archive:images/x.tar", "absolute"),
        ("oci:/a/../etc", "plain path"),
        ("/a//b", "plain path"),
        ("/a/", "plain path"),
        ("docker-archive:", "absolute"),
        ("oci:/x:", "empty image name"),
        ("not a reference", "neither"),
        ("http://host/x", "neither"),
    ],
)
def test_bad_images(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_image(text)


@pytest.mark.parametrize(
    ("text", "mount"),
    [
        ("/scratch", Mount("/scratch", "/scratch")),
        ("/scratch:ro", Mount("/scratch", "/scratch", True)),
        ("/datasets/imagenet:/data:ro", Mount("/datasets/imagenet", "/data", True)),
        ("/datasets/imagenet:/data:rw", Mount("/datasets/imagenet", "/data")),
        ("/home/alice/proj:/work", Mount("/home/alice/proj", "/work")),
        ("/tmp/x:/tmp", Mount("/tmp/x", "/tmp")),
    ],
)
def test_mounts(text: str, mount: Mount) -> None:
    assert parse_mount(text) == mount
    assert parse_mount(str(mount)) == mount


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "HOST"),
        ("data", "absolute"),
        ("/data:data", "absolute"),
        ("/a:/b:/c", "paths with ':'"),
        ("/a:/b:ro:x", "paths with ':'"),
        ("/", "system path"),
        ("/proc", "system path"),
        ("/x:/proc/sys", "system path"),
        ("/dev/nvidia0:/gpu", "system path"),
        ("/x:/dev/shm", "system path"),
        ("/sys/fs:/fs", "system path"),
        ("/x:/", "system path"),
        ("/a/../b", "plain path"),
        ("/a/./b:/c", "plain path"),
        ("/x:/etc", "covers|would cover /etc/passwd"),
        ("/x:/etc/resolv.conf", "would cover"),
        ("/x:/usr/local/nvidia/lib64", "would cover /usr/local/nvidia"),
        ("/x:/usr", "would cover /usr/local/nvidia"),
    ],
)
def test_bad_mounts(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_mount(text)


def test_a_container_path_mounted_twice_is_refused() -> None:
    assert len(check_mounts(["/a:/data", "/a:/more"])) == 2  # a host path twice is fine
    with pytest.raises(ValueError, match="/data is mounted twice"):
        check_mounts(["/a:/data", "/b:/data:ro"])
    with pytest.raises(ValueError, match="at most 64 mounts"):
        check_mounts([f"/m{i}" for i in range(65)])
