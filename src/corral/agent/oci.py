"""Reading container images from the node's filesystem: an OCI image layout (``oci:``), a
tar of one (``oci-archive:``) or what ``docker save`` writes (``docker-archive:``).

An image is described by its key (the digest a cache entry is named by), its config and
its layers, in order. Every JSON document is checked against the digest it is named by,
the layers as they are unpacked (``layers.py``): the key stands for the whole image.

The agent may be root and the image's path the job's choice, so the files are opened on
behalf of the job's account (``open_as``): each directory on the way must be searchable
by it and the file readable by it (owner, group and other permission bits of its uid and
groups; POSIX ACLs are not consulted), and symbolic links are followed as it would follow
them, without a window in which a link swapped in could point the agent elsewhere.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from corral.agent.identity import Account
from corral.core.container import ImageKind, ImageRef

MAX_DOCUMENT = 4 << 20  # bytes of an index, manifest or config read into memory
MAX_LINKS = 40
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
REF_NAME = "org.opencontainers.image.ref.name"
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}


class ImageSourceError(ValueError):
    """An image that cannot be read; the message says why (without the image's name)."""


@dataclass
class Layer:
    """One layer: ``open`` gives its blob; ``digest`` is checked against the blob, or
    ``diff_id`` against the uncompressed tar (None: not checked)."""

    open: Callable[[], BinaryIO]
    digest: str | None = None
    diff_id: str | None = None


@dataclass
class ImageSource:
    key: str  # sha256:... of the manifest (OCI) or of the config (docker save)
    config: dict[str, Any]  # the image config's "config" (Env, WorkingDir, ...)
    layers: list[Layer] = field(default_factory=list)
    close: Callable[[], None] = lambda: None


def read_image(ref: ImageRef, account: Account | None) -> ImageSource:
    """The image ``ref`` names (an ``oci``, ``oci-archive`` or ``docker-archive`` one), read
    as ``account``; ImageSourceError (or OSError) when it cannot be."""
    if ref.kind is ImageKind.OCI:
        folder = Folder.at(ref.path, account)
        try:
            return _oci(folder.read, folder.open, ref.tag, folder.close)
        except BaseException:
            folder.close()
            raise
    handle = open_as(ref.path, account)
    try:
        archive = _Archive(handle)
        if ref.kind is ImageKind.OCI_ARCHIVE:
            if not archive.has("index.json"):
                raise ImageSourceError("not an OCI archive: no index.json in it")
            return _oci(archive.read, archive.open, ref.tag, handle.close)
        return _docker(archive, handle.close)
    except BaseException:
        handle.close()
        raise


# -- OCI image layout ------------------------------------------------------------------


def _oci(
    read: Callable[[str], bytes],
    open_blob: Callable[[str], BinaryIO],
    tag: str | None,
    close: Callable[[], None],
) -> ImageSource:
    index = _json(read("index.json"), "index.json")
    descriptor = _choose(index, tag, lambda d: _json(_blob(read, d), d["digest"]))
    manifest = _json(_blob(read, descriptor), descriptor["digest"])
    config_descriptor = manifest.get("config")
    if not isinstance(config_descriptor, dict):
        raise ImageSourceError(f"manifest {descriptor['digest']} has no config")
    config = _json(_blob(read, config_descriptor), config_descriptor["digest"])
    layers = []
    for item in manifest.get("layers") or []:
        digest = _digest(item)
        if item.get("urls"):
            raise ImageSourceError(f"layer {digest} is not in the image (a foreign layer)")
        layers.append(Layer(lambda d=digest: open_blob(_blob_path(d)), digest=digest))
    return ImageSource(descriptor["digest"], _run_config(config), layers, close)


def _choose(
    index: dict[str, Any], tag: str | None, load: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """The manifest descriptor of ``index`` for this node: the one named ``tag`` if given,
    else the only one, else the one for this node's platform (nested indexes followed)."""
    found: list[dict[str, Any]] = []
    pending = [(d, 0) for d in index.get("manifests") or []]
    while pending:
        item, depth = pending.pop(0)
        if not isinstance(item, dict):
            raise ImageSourceError("index.json: a manifest entry is not an object")
        _digest(item)
        if item.get("mediaType") in INDEX_TYPES:
            if depth > 3:
                raise ImageSourceError("indexes nested too deep")
            inner = load(item)
            name = (item.get("annotations") or {}).get(REF_NAME)
            for child in inner.get("manifests") or []:
                if isinstance(child, dict) and name:
                    child = {
                        **child,
                        "annotations": {REF_NAME: name, **(child.get("annotations") or {})},
                    }
                pending.append((child, depth + 1))
        else:
            found.append(item)
    if tag is not None:
        found = [d for d in found if (d.get("annotations") or {}).get(REF_NAME) == tag]
        if not found:
            raise ImageSourceError(f"no image named {tag!r} in it")
    if not found:
        raise ImageSourceError("index.json lists no image")
    if len(found) == 1:
        return found[0]
    arch = ARCH.get(platform.machine(), platform.machine())
    mine = [
        d
        for d in found
        if (d.get("platform") or {}).get("architecture") == arch
        and (d.get("platform") or {}).get("os", "linux") == "linux"
    ]
    if len(mine) == 1:
        return mine[0]
    names = sorted({(d.get("annotations") or {}).get(REF_NAME) or d["digest"] for d in found})
    raise ImageSourceError(
        f"it holds {len(found)} images: name one (oci-archive:PATH:NAME), of {', '.join(names)}"
    )


def _blob(read: Callable[[str], bytes], descriptor: dict[str, Any]) -> bytes:
    digest = _digest(descriptor)
    data = read(_blob_path(digest))
    if _sha256(data) != digest:
        raise ImageSourceError(f"blob {digest} does not match its digest")
    return data


def _blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _digest(descriptor: dict[str, Any]) -> str:
    digest = descriptor.get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise ImageSourceError(f"unsupported digest {digest!r} (only sha256 is)")
    hexa = digest.removeprefix("sha256:")
    if len(hexa) != 64 or any(c not in "0123456789abcdef" for c in hexa):
        raise ImageSourceError(f"malformed digest {digest!r}")
    return digest


# -- docker save -----------------------------------------------------------------------


def _docker(archive: _Archive, close: Callable[[], None]) -> ImageSource:
    if not archive.has("manifest.json"):
        raise ImageSourceError("not a docker-archive: no manifest.json in it")
    entries = json.loads(archive.read("manifest.json"))
    if not isinstance(entries, list) or not entries:
        raise ImageSourceError("manifest.json lists no image")
    if len(entries) > 1:
        raise ImageSourceError(f"it holds {len(entries)} images; save one per archive")
    entry = entries[0]
    config_name = entry.get("Config") if isinstance(entry, dict) else None
    if not isinstance(config_name, str):
        raise ImageSourceError("manifest.json names no config")
    config_bytes = archive.read(config_name)
    key = _sha256(config_bytes)
    named = config_name.rsplit("/", 1)[-1].removesuffix(".json")
    if len(named) == 64 and "sha256:" + named != key:
        raise ImageSourceError(f"{config_name} does not match its digest")
    config = _json(config_bytes, config_name)
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    names = entry.get("Layers") or []
    if not isinstance(names, list) or len(names) != len(diff_ids):
        raise ImageSourceError(f"{len(names)} layers for {len(diff_ids)} diff_ids in its config")
    layers = [
        Layer(lambda n=name: archive.open(n), diff_id=_digest({"digest": diff_id}))
        for name, diff_id in zip(names, diff_ids, strict=True)
    ]
    return ImageSource(key, _run_config(config), layers, close)


def _run_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("config")
    return inner if isinstance(inner, dict) else {}


def _json(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ImageSourceError(f"{what}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ImageSourceError(f"{what}: not a JSON object")
    return value


def read_document(handle: BinaryIO, name: str) -> bytes:
    """All of ``handle`` (closed after), at most ``MAX_DOCUMENT`` bytes: a JSON document
    of an image (index, manifest, config), never a layer."""
    with handle:
        data = handle.read(MAX_DOCUMENT + 1)
    if len(data) > MAX_DOCUMENT:
        raise ImageSourceError(f"{name} is larger than {MAX_DOCUMENT} bytes")
    return data


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Archive:
    """A tar of an image, its members found by name (``./`` prefixes ignored)."""

    def __init__(self, handle: BinaryIO) -> None:
        try:
            self.tar = tarfile.open(fileobj=handle, mode="r:*")  # noqa: SIM115
        except tarfile.TarError as exc:
            raise ImageSourceError(f"not a tar archive ({exc})") from None
        self.members = {}
        for member in self.tar.getmembers():
            self.members.setdefault(member.name.removeprefix("./").lstrip("/"), member)

    def has(self, name: str) -> bool:
        return name in self.members

    def open(self, name: str) -> BinaryIO:
        member = self.members.get(name.removeprefix("./"))
        if member is None:
            raise ImageSourceError(f"{name} is missing from the archive")
        if member.issym() or member.islnk():
            member = self.tar._find_link_target(member)  # noqa: SLF001 -- as extractfile does
        handle = self.tar.extractfile(member) if member.isfile() else None
        if handle is None:
            raise ImageSourceError(f"{name} is not a file in the archive")
        return handle  # type: ignore[return-value]

    def read(self, name: str) -> bytes:
        return read_document(self.open(name), name)


# -- files opened on behalf of an account ----------------------------------------------


def open_as(path: str, account: Account | None) -> BinaryIO:
    """``path`` opened for reading as ``account`` would open it (None: as this process).
    Raises OSError (ENOENT, EACCES naming the account, ...)."""
    if account is None or os.geteuid() != 0:
        return open(path, "rb")  # noqa: SIM115 -- the caller closes it
    fd = _walk(_Fds.at_root(), path, account)
    return os.fdopen(fd, "rb")


@dataclass
class Folder:
    """A directory opened as ``account``: files in it are opened as it would."""

    fds: _Fds
    account: Account | None
    path: str

    @classmethod
    def at(cls, path: str, account: Account | None) -> Folder:
        if account is None or os.geteuid() != 0:
            if not os.path.isdir(path):
                code = errno.ENOTDIR if os.path.exists(path) else errno.ENOENT
                raise OSError(code, os.strerror(code), path)
            return cls(_Fds([]), None, path)
        fds = _Fds.at_root()
        fd = _walk(fds, path, account, directory=True)
        fds.stack.append(fd)
        return cls(fds, account, path)

    def open(self, name: str) -> BinaryIO:
        if self.account is None:
            return open(os.path.join(self.path, name), "rb")  # noqa: SIM115
        fds = self.fds.copy()
        try:
            return os.fdopen(_walk(fds, name, self.account, relative=True), "rb")
        finally:
            fds.close_extra(0)

    def read(self, name: str) -> bytes:
        return read_document(self.open(name), name)

    def close(self) -> None:
        self.fds.close_extra(0)


@dataclass
class _Fds:
    """The directories walked so far, as descriptors (the last is the current one)."""

    stack: list[int]

    @classmethod
    def at_root(cls) -> _Fds:
        return cls([os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)])

    def copy(self) -> _Fds:
        return _Fds([os.dup(fd) for fd in self.stack])

    def close_extra(self, keep: int) -> None:
        while len(self.stack) > keep:
            os.close(self.stack.pop())

    def up(self) -> None:
        if len(self.stack) > 1:
            os.close(self.stack.pop())

    def to_root(self) -> None:
        while len(self.stack) > 1:
            os.close(self.stack.pop())


def _walk(
    fds: _Fds, path: str, account: Account, directory: bool = False, relative: bool = False
) -> int:
    """Follow ``path`` from ``fds`` (its root first) as ``account``; returns a descriptor
    of the file (read-only) or, with ``directory``, of the directory (O_PATH)."""
    if not relative and not path.startswith("/"):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    todo = list(reversed(path.split("/")))
    links = 0
    if path.startswith("/"):
        fds.to_root()
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            fds.up()
            continue
        current = fds.stack[-1]
        if not _allowed(os.fstat(current), account, 1):
            raise OSError(errno.EACCES, f"{account.name} may not search a directory of", path)
        fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            os.close(fd)
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(part, dir_fd=current)
            if target.startswith("/"):
                fds.to_root()
            todo.extend(reversed(target.split("/")))
        elif stat.S_ISDIR(info.st_mode):
            fds.stack.append(fd)
        elif todo and any(p not in ("", ".") for p in todo):
            os.close(fd)
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        else:
            os.close(fd)
            return _final(current, part, info, account, path, directory)
    if not directory:
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    last = fds.stack.pop()
    if not _allowed(os.fstat(last), account, 5):
        os.close(last)
        raise OSError(errno.EACCES, f"{account.name} may not read the directory", path)
    return last


def _final(
    parent: int, name: str, info: os.stat_result, account: Account, path: str, directory: bool
) -> int:
    if directory:
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    if not _allowed(info, account, 4):
        raise OSError(errno.EACCES, f"{account.name} may not read", path)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent)
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (info.st_dev, info.st_ino):
        os.close(fd)
        raise OSError(errno.EAGAIN, "the file changed while it was opened", path)
    os.set_blocking(fd, True)
    return fd


def _allowed(info: os.stat_result, account: Account, want: int) -> bool:
    """Whether ``account`` has the ``want`` bits (4 read, 1 search) by the mode bits."""
    if account.uid == 0:
        return True
    mode = info.st_mode
    if info.st_uid == account.uid:
        bits = mode >> 6
    elif info.st_gid in account.groups:
        bits = mode >> 3
    else:
        bits = mode
    return bits & want == want
