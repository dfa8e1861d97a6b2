"""Container images and mounts of a job (SPEC section 7), as the manifest names them.

Pure parsing and checks, shared by the manifest (refused at submission) and the agent
(which runs the task in the image). ``image``: a root filesystem directory (``/path``), an
OCI image layout (``oci:/path``), an OCI archive (``oci-archive:/path.tar``), a
``docker save`` archive (``docker-archive:/path.tar``), or any other text: a reference a
node's runtime would pull from a registry. ``mounts``: ``HOST[:CONTAINER][:ro|:rw]``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import StrEnum

MAX_MOUNTS = 64
MAX_PATH = 4096
# Where a mount may neither come from nor go: the kernel's views (and the root itself).
# A task's /proc, /sys and /dev are its container's own; a host /dev would hand it every
# device of the node, which only its GPUs' device files may reach.
SYSTEM_PATHS = ("/proc", "/sys", "/dev")
# What Corral itself puts in every container: a mount may not cover it (nor go inside the
# driver's directory).
PROVIDED = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/usr/local/nvidia")
_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


class ImageKind(StrEnum):
    DIRECTORY = "dir"  # a root filesystem, used in place
    OCI = "oci"  # an OCI image layout directory
    OCI_ARCHIVE = "oci-archive"  # a tar of an OCI image layout
    DOCKER_ARCHIVE = "docker-archive"  # what `docker save` writes
    REGISTRY = "registry"  # a reference to pull


@dataclass(frozen=True)
class ImageRef:
    """A parsed ``image``: ``path`` for the local forms, ``reference`` for a pull; ``tag``
    picks one image of an OCI layout or archive by its ``org.opencontainers.image.ref.name``
    (``oci:/images/layout:v2``)."""

    kind: ImageKind
    text: str  # as the manifest gave it
    path: str = ""
    tag: str | None = None

    @property
    def cached(self) -> bool:
        """True for the forms that are unpacked into a node's image cache."""
        return self.kind in (ImageKind.OCI, ImageKind.OCI_ARCHIVE, ImageKind.DOCKER_ARCHIVE)


@dataclass(frozen=True)
class Mount:
    """``source`` on the node at ``target`` in the container; read-only if ``read_only``."""

    source: str
    target: str
    read_only: bool = False

    def __str__(self) -> str:
        text = self.source if self.target == self.source else f"{self.source}:{self.target}"
        return text + (":ro" if self.read_only else "")


def parse_image(text: str) -> ImageRef:
    """The image ``text`` names; ValueError saying what is wrong with it."""
    if not text or text != text.strip():
        raise ValueError("must not be empty or start or end with spaces")
    if len(text) > MAX_PATH:
        raise ValueError(f"at most {MAX_PATH} characters")
    if text.startswith("/"):
        return ImageRef(ImageKind.DIRECTORY, text, check_path(text, "an image directory"))
    for kind in (ImageKind.OCI_ARCHIVE, ImageKind.DOCKER_ARCHIVE, ImageKind.OCI):
        prefix = f"{kind.value}:"
        if text.startswith(prefix):
            path, tag = text[len(prefix) :], None
            if kind is not ImageKind.DOCKER_ARCHIVE and ":" in path:
                path, tag = path.rsplit(":", 1)
                if not tag:
                    raise ValueError(f"{text!r}: empty image name after the last ':'")
            what = "a directory" if kind is ImageKind.OCI else "an archive"
            return ImageRef(kind, text, check_path(path, f"{kind.value}: {what}"), tag)
    reference = text.removeprefix("docker://")
    if not _REFERENCE.match(reference) or "//" in reference:
        raise ValueError(
            f"{text!r} is neither an absolute path (a root filesystem), oci:PATH, "
            "oci-archive:PATH, docker-archive:PATH, nor an image reference"
        )
    return ImageRef(ImageKind.REGISTRY, text)


def parse_mount(text: str) -> Mount:
    """``HOST[:CONTAINER][:ro|:rw]``; ValueError saying what is wrong (paths must be absolute
    and plain, and keep out of ``/``, ``/proc``, ``/sys`` and ``/dev``)."""
    if not isinstance(text, str) or not text:
        raise ValueError("a mount is HOST[:CONTAINER][:ro], e.g. /datasets/imagenet:/data:ro")
    parts = text.split(":")
    read_only = False
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        read_only = parts.pop() == "ro"
    if len(parts) > 2:
        raise ValueError(
            f"{text!r}: a mount is HOST[:CONTAINER][:ro] (paths with ':' are not supported)"
        )
    source = check_mount_path(parts[0], text, "host")
    target = check_mount_path(parts[1], text, "container") if len(parts) == 2 else source
    return Mount(source, target, read_only)


def check_mount_path(path: str, text: str, side: str) -> str:
    where = check_path(path, f"{text!r}: the {side} path")
    if where == "/" or any(where == p or where.startswith(p + "/") for p in SYSTEM_PATHS):
        raise ValueError(
            f"{text!r}: the {side} path {where} is a system path (/, /proc, /sys, /dev "
            "and what is under them cannot be mounted)"
        )
    if side == "container":
        for provided in PROVIDED:
            if (
                provided == where
                or provided.startswith(where + "/")
                or where.startswith(provided + "/")
            ):
                raise ValueError(
                    f"{text!r}: the container path {where} would cover {provided}, which Corral "
                    "provides in the container"
                )
    return where


def check_path(path: str, what: str) -> str:
    """``path`` if it is absolute and plain: no ``.``, ``..`` or empty components, no
    trailing slash, no newline; else ValueError naming ``what``."""
    if not path.startswith("/"):
        raise ValueError(f"{what} must be an absolute path, got {path!r}")
    if len(path) > MAX_PATH:
        raise ValueError(f"{what} is longer than {MAX_PATH} characters")
    if any(c in path for c in "\n\r\0"):
        raise ValueError(f"{what} must not contain a newline")
    if path != "/" and (posixpath.normpath(path) != path or "//" in path):
        raise ValueError(f"{what} must be a plain path (no '.', '..', '//' or trailing '/')")
    return path


def check_mounts(texts: list[str]) -> tuple[Mount, ...]:
    """Every mount parsed; ValueError for a bad one or two at one container path."""
    if len(texts) > MAX_MOUNTS:
        raise ValueError(f"at most {MAX_MOUNTS} mounts, got {len(texts)}")
    mounts = tuple(parse_mount(text) for text in texts)
    seen: set[str] = set()
    for mount in mounts:
        if mount.target in seen:
            raise ValueError(f"{mount.target} is mounted twice")
        seen.add(mount.target)
    return mounts
