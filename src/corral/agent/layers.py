"""Unpacking image layers (tar streams, plain, gzip or zstd) into a root filesystem.

Layers apply in order, as the OCI image spec says: a ``.wh.NAME`` entry deletes NAME of the
layers below, ``.wh..wh..opq`` empties its directory of what they put there, and entries of
one layer never hide each other. The agent may be root and the image anyone's, so nothing in
a layer is trusted:

- a member named by an absolute path or with a ``..`` component refuses the image, and so
  do a device node outside ``/dev`` (those in ``/dev`` are skipped: the container's /dev is
  its own), a hard link to a path outside the image or to no file, and a relative symbolic
  link that climbs above the image's root;
- paths are resolved inside the root: a symbolic link met on the way is followed as the
  container would (an absolute target from the image's root, ``..`` stopping there), never
  on the host;
- files are the agent's, not the archive's owners', and lose setuid, setgid and sticky bits
  and write permission for group and others (the cache is shared by every account of the
  node).

Layer blobs are hashed as they stream: the compressed bytes against the manifest's digest
(OCI), the uncompressed tar against the config's ``diff_id`` (``docker save``); a mismatch
refuses the image, so that a cache keyed by digest holds what the digest names.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
import threading
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_LINKS = 40  # symbolic links followed while resolving one path (as the kernel)
CHUNK = 1 << 20
ENTRY_COST = 512  # bytes counted per entry, beside file contents, against the size limit
SAFE_FILE_MODE = 0o755  # no setuid/setgid/sticky, no write for group and others


class LayerError(ValueError):
    """A layer that cannot be (or must not be) unpacked; the message says why."""


@dataclass
class Unpacked:
    """What the layers of one image wrote so far: bytes (contents plus ``ENTRY_COST`` per
    entry), and the modes and times of directories, applied once all layers are in (so
    that a read-only directory still takes the entries of later layers)."""

    root: str
    limit: int | None = None  # bytes; past it the image is refused
    size: int = 0
    dirs: dict[str, tuple[int, float | None]] = field(default_factory=dict)

    def count(self, amount: int) -> None:
        self.size += amount
        if self.limit is not None and self.size > self.limit:
            raise LayerError(
                f"it unpacks to more than the image cache's limit of {self.limit:,} bytes"
            )

    def finish(self) -> None:
        """Apply the directories' modes and times, deepest first."""
        for path in sorted(self.dirs, key=lambda p: p.count("/"), reverse=True):
            mode, mtime = self.dirs[path]
            with contextlib.suppress(OSError):  # (gone, or replaced by a later layer)
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    continue
                os.chmod(path, mode & SAFE_FILE_MODE)
                if mtime is not None:
                    os.utime(path, (mtime, mtime))


def apply_layer(
    unpacked: Unpacked, blob: BinaryIO, digest: str | None = None, diff_id: str | None = None
) -> None:
    """Unpack one layer ``blob`` (plain, gzip or zstd tar) onto ``unpacked.root``;
    ``digest`` is checked against the blob's bytes, ``diff_id`` against its uncompressed
    tar. Raises LayerError (or OSError)."""
    raw = _Hashing(blob)
    head = raw.read(4)
    stream: BinaryIO
    zstd: _Zstd | None = None
    if head[:2] == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=_Prefixed(head, raw), mode="rb")  # type: ignore[assignment]
    elif head == b"\x28\xb5\x2f\xfd":
        zstd = _Zstd(_Prefixed(head, raw))
        stream = zstd.stdout
    else:
        stream = _Prefixed(head, raw)  # type: ignore[assignment]
    plain = _Hashing(stream)
    try:
        with tarfile.open(fileobj=plain, mode="r|") as tar:  # type: ignore[call-overload]
            _apply(unpacked, tar)
        _drain(plain)
        if zstd is not None:
            zstd.finish()
        else:
            _drain(raw)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise LayerError(f"not a valid layer: {exc}") from None
    finally:
        if zstd is not None:
            zstd.close()
    if digest is not None and raw.digest != digest:
        raise LayerError(f"layer {digest}: its bytes hash to {raw.digest}")
    if diff_id is not None and plain.digest != diff_id:
        raise LayerError(f"layer {diff_id}: its tar hashes to {plain.digest}")


def _apply(unpacked: Unpacked, tar: tarfile.TarFile) -> None:
    root = unpacked.root
    created: set[str] = set()  # paths (relative, resolved) this layer put there
    for member in tar:
        parts = _member_parts(member.name)
        if not parts:
            if member.isdir():  # the root itself ("./")
                unpacked.dirs[root] = (member.mode | 0o700, float(member.mtime))
            continue
        name = parts[-1]
        parent_rel = _resolve(root, parts[:-1], create=True, unpacked=unpacked)
        parent = _host(root, parent_rel)
        if name == OPAQUE:
            _empty_except(root, parent_rel, created)
            continue
        if name.startswith(WHITEOUT):
            hidden = posixpath.join(parent_rel, name[len(WHITEOUT) :])
            if hidden not in created:
                _remove(_host(root, hidden))
            continue
        rel = posixpath.join(parent_rel, name)
        path = os.path.join(parent, name)
        unpacked.count(ENTRY_COST)
        if member.ischr() or member.isblk():
            if parts[0] == "dev":
                continue  # the container's /dev is its own
            raise LayerError(f"{member.name}: a device node (refused outside /dev)")
        if member.isdir():
            if not (os.path.isdir(path) and not os.path.islink(path)):
                _remove(path)
                os.mkdir(path, 0o700)
            unpacked.dirs[path] = (member.mode | 0o700, float(member.mtime))
        elif member.issym():
            _check_symlink(parent_rel, member.linkname, member.name)
            _remove(path)
            os.symlink(member.linkname, path)
        elif member.islnk():
            target = _hardlink_target(root, member.linkname, member.name, unpacked)
            if target == path:
                continue  # a link to itself: the file is there
            _remove(path)
            os.link(target, path, follow_symlinks=False)
        elif member.isfifo():
            _remove(path)
            os.mkfifo(path, member.mode & SAFE_FILE_MODE)
        elif member.isreg():
            _remove(path)
            _write_file(path, tar, member, unpacked)
        else:
            continue  # (GNU extensions tarfile hands on are all of the above)
        if not member.isdir():
            with contextlib.suppress(OSError):
                os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
        created.add(rel)


def _member_parts(name: str) -> list[str]:
    """The components of a member's name, without ``.``; LayerError for an absolute name
    or one with ``..``."""
    if name.startswith("/"):
        raise LayerError(f"{name}: an absolute path (refused)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LayerError(f"{name}: a path with '..' (refused)")
    return parts


def _check_symlink(parent: str, target: str, name: str) -> None:
    """A relative link (in directory ``parent``, relative to the root) must not climb above
    the root (an absolute one is read from the image's root, in the container)."""
    if target.startswith("/"):
        return
    depth = len(parent.split("/")) if parent else 0
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise LayerError(f"{name}: a symbolic link out of the image ({target})")
        elif part not in ("", "."):
            depth += 1


def _hardlink_target(root: str, linkname: str, name: str, unpacked: Unpacked) -> str:
    try:
        parts = _member_parts(linkname)
    except LayerError:
        raise LayerError(f"{name}: a hard link out of the image ({linkname})") from None
    if not parts:
        raise LayerError(f"{name}: a hard link to the root")
    missing = f"{name}: a hard link to {linkname}, which is not in the image"
    try:
        parent = _resolve(root, parts[:-1], create=False, unpacked=unpacked)
    except LayerError:
        raise LayerError(missing) from None
    target = os.path.join(_host(root, parent), parts[-1])
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        raise LayerError(missing) from None
    if not stat.S_ISREG(info.st_mode):
        raise LayerError(f"{name}: a hard link to {linkname}, which is not a file")
    return target


def _write_file(
    path: str, tar: tarfile.TarFile, member: tarfile.TarInfo, unpacked: Unpacked
) -> None:
    source = tar.extractfile(member)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        if source is not None:
            while chunk := source.read(CHUNK):
                unpacked.count(len(chunk))
                out.write(chunk)
        os.fchmod(out.fileno(), member.mode & SAFE_FILE_MODE)


def _resolve(root: str, parts: list[str], create: bool, unpacked: Unpacked) -> str:
    """The real directory (relative to ``root``, ``""`` for the root) that ``parts``
    name, following symbolic links inside ``root`` as the container would. Missing
    directories are made when ``create`` (a layer need not list its parents), else
    LayerError."""
    todo = list(reversed(parts))
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        path = os.path.join(root, *done, part)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if not create:
                raise LayerError(f"{'/'.join([*done, part])}: no such directory") from None
            os.mkdir(path, 0o700)
            unpacked.dirs[path] = (0o755, None)
            done.append(part)
            continue
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise LayerError(f"{'/'.join([*done, part])}: too many symbolic links")
            target = os.readlink(path)
            if target.startswith("/"):
                done = []
            todo.extend(reversed(target.split("/")))
        elif stat.S_ISDIR(info.st_mode):
            done.append(part)
        else:
            raise LayerError(f"{'/'.join([*done, part])}: not a directory")
    return "/".join(done)


def _host(root: str, rel: str) -> str:
    return os.path.join(root, rel) if rel else root


def _remove(path: str) -> None:
    """Remove whatever is at ``path`` (a directory with its contents), if anything."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def remove_tree(path: str) -> None:
    """``rm -rf path``, also through directories without write permission (an image's
    read-only directories, for an agent that is not root)."""

    def retry(function, target, _exc):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
        function(target)

    shutil.rmtree(path, onerror=retry)


def _empty_except(root: str, rel: str, kept: set[str]) -> None:
    """An opaque directory: remove what lower layers put under ``rel`` (this layer's
    entries, ``kept``, stay)."""
    directory = _host(root, rel)
    for entry in os.scandir(directory):
        child = posixpath.join(rel, entry.name) if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            _empty_except(root, child, kept)
            if child not in kept and not any(k.startswith(child + "/") for k in kept):
                os.rmdir(entry.path)
        elif child not in kept:
            os.unlink(entry.path)


def _drain(stream: BinaryIO) -> None:
    while stream.read(CHUNK):
        pass


class _Hashing:
    """A reader that hashes (SHA-256) what passes through it."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.hash.update(data)
        return data

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


class _Prefixed:
    """``head`` (bytes already read), then the rest of ``inner``."""

    def __init__(self, head: bytes, inner: _Hashing) -> None:
        self.head = head
        self.inner = inner

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0:
                data, self.head = self.head + self.inner.read(), b""
                return data
            data, self.head = self.head[:size], self.head[size:]
            if len(data) < size:
                data += self.inner.read(size - len(data))
            return data
        return self.inner.read(size)


class _Zstd:
    """A zstd-compressed stream, decompressed by the node's ``zstd`` command."""

    def __init__(self, source: _Prefixed) -> None:
        zstd = shutil.which("zstd")
        if zstd is None:
            raise LayerError("a zstd-compressed layer, and this node has no zstd command")
        self.proc = subprocess.Popen(
            [zstd, "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.stdout: BinaryIO = self.proc.stdout  # type: ignore[assignment]
        self.feeder = threading.Thread(target=self._feed, args=(source,), daemon=True)
        self.feeder.start()

    def _feed(self, source: _Prefixed) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(OSError), stdin:
            while chunk := source.read(CHUNK):
                stdin.write(chunk)

    def finish(self) -> None:
        """Wait for the whole blob to pass; LayerError if zstd found it corrupt."""
        self.feeder.join()
        if self.proc.wait() != 0:
            assert self.proc.stderr is not None
            why = self.proc.stderr.read().decode(errors="replace").strip()
            raise LayerError(f"not a valid zstd layer: {why or 'zstd failed'}")

    def close(self) -> None:
        self.stdout.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.feeder.join()
