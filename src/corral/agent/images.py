"""The node's image cache: images unpacked once, keyed by digest, evicted least recently
used past a size limit.

Layout of the cache directory (0711: every account may reach an image it knows the digest
of, none may list them)::

    <cache>/sha256-<hex>/rootfs/       an unpacked root filesystem (0755)
    <cache>/sha256-<hex>/image.json    its config, size and last use (the file's mtime)
    <cache>/.locks/sha256-<hex>.lock   its lease lock (0700 directory)
    <cache>/.locks/sha256-<hex>.unpack its unpack lock
    <cache>/.tmp-*                     unpacks in progress and evictions (0700)

An image is unpacked into a temporary directory and renamed into place when complete, so
a failure (or a crash) leaves nothing half-unpacked under its name. Locks are ``flock``
locks, so they hold across the threads of an agent and across agents sharing a cache.
Every task using an image holds its lease lock shared until it is forgotten (from before
the image is unpacked), so that eviction, which needs it exclusively, never takes an image
from under a task. An unpack holds the image's unpack lock exclusively: a second task of
the same image waits for it, then uses what it unpacked. Leases never wait for each other.

A plain directory image is used in place, without the cache; a reference to a registry is
refused (this runtime pulls nothing).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.agent.identity import Account
from corral.agent.layers import LayerError, Unpacked, apply_layer, remove_tree
from corral.agent.oci import Folder, ImageSource, ImageSourceError, read_image
from corral.core.container import ImageKind, ImageRef, parse_image

log = logging.getLogger(__name__)

DEFAULT_CACHE_SIZE = 50 * 1000**3  # bytes
LOCKS = ".locks"
LEASE = ".lock"  # shared by every task using the image, exclusive to evict it
UNPACK = ".unpack"  # exclusive while the image is unpacked
TEMPORARY = ".tmp-"


class ImageError(Exception):
    """An image that cannot be used here; the message names it and says why."""


@dataclass
class Image:
    """A root filesystem ready for a task: ``key`` None for a directory used in place;
    ``lease`` the descriptor holding the image's shared lock (``ImageCache.release``)."""

    ref: ImageRef
    root: Path
    config: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    lease: int | None = None


@dataclass
class _Entry:
    key: str
    size: int
    used: float


class ImageCache:
    """The cache in ``directory`` (created 0711), holding at most ``limit`` bytes of images
    no task uses (more while tasks use them)."""

    def __init__(self, directory: Path, limit: int = DEFAULT_CACHE_SIZE, node: str = "") -> None:
        self.directory = directory
        self.limit = limit
        self.node = node
        self._ready = False
        self._setup = threading.Lock()

    # -- use -------------------------------------------------------------------------

    def acquire(self, text: str, account: Account | None) -> Image:
        """The image ``text`` names, ready to run ``account``'s task: unpacked into the cache
        unless it was (a directory image: checked to exist). Holds a lease on a cached image
        until :meth:`release`. Raises ImageError."""
        try:
            ref = parse_image(text)
        except ValueError as exc:
            raise ImageError(f"image {text}: {exc}") from None
        where = f" on node {self.node}" if self.node else " on this node"
        if ref.kind is ImageKind.REGISTRY:
            raise ImageError(
                f"image {text}: cannot pull it{where}: Corral's container runtime "
                "(bubblewrap) pulls from no registry; save the image where the nodes can read "
                "it (`skopeo copy docker://REF oci-archive:/shared/NAME.tar`, or `docker save`) "
                "and give oci-archive:PATH or docker-archive:PATH"
            )
        if ref.kind is ImageKind.DIRECTORY:  # the account's own access applies
            try:
                Folder.at(ref.path, account).close()
            except FileNotFoundError:
                raise ImageError(f"image {text}: no such directory{where}") from None
            except OSError as exc:
                raise ImageError(f"image {text}: {_os_problem(exc)}") from None
            return Image(ref, Path(ref.path))
        self._prepare()
        try:
            source = read_image(ref, account)
        except FileNotFoundError:
            raise ImageError(f"image {text}: not found{where}") from None
        except ImageSourceError as exc:
            raise ImageError(f"image {text}: {exc}") from None
        except OSError as exc:
            raise ImageError(f"image {text}: {_os_problem(exc)}") from None
        try:
            return self._cached(ref, source)
        finally:
            source.close()

    def release(self, image: Image) -> None:
        """Give back a lease (the task that used the image is gone)."""
        if image.lease is not None:
            with contextlib.suppress(OSError):
                os.close(image.lease)
            image.lease = None

    def lease(self, key: str) -> int | None:
        """A new lease on the cached image ``key`` (a task re-adopted after an agent
        restart), None if it is no longer cached."""
        if not _valid_key(key) or not self.directory.is_dir():
            return None
        fd = self._lock_file(key)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if (self.directory / key / "image.json").exists():
            return fd
        os.close(fd)
        return None

    def entries(self) -> list[_Entry]:
        """The cached images, least recently used first."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for path in self.directory.iterdir():
                if not _valid_key(path.name):
                    continue
                info = path / "image.json"
                try:
                    size = int(json.loads(info.read_text()).get("size", 0))
                    used = info.stat().st_mtime
                except (OSError, ValueError, AttributeError):
                    continue
                found.append(_Entry(path.name, size, used))
        return sorted(found, key=lambda e: e.used)

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least recently used images no task uses until the cache fits its limit;
        ``keep`` is never removed. Returns the keys removed."""
        entries = self.entries()
        total = sum(e.size for e in entries)
        removed = []
        for entry in entries:
            if total <= self.limit:
                break
            if entry.key == keep:
                continue
            fd = self._lock_file(entry.key)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # in use
            try:
                doomed = self.directory / f"{TEMPORARY}evict-{entry.key}-{secrets.token_hex(4)}"
                os.rename(self.directory / entry.key, doomed)
                remove_tree(str(doomed))
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
            total -= entry.size
            removed.append(entry.key)
            log.info("image cache: evicted %s (%s bytes)", entry.key, f"{entry.size:,}")
        return removed

    # -- internals ---------------------------------------------------------------------

    def _prepare(self) -> None:
        """Create the cache directory and remove what crashed unpacks left."""
        with self._setup:
            if self._ready:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            os.chmod(self.directory, 0o711)
            locks = self.directory / LOCKS
            locks.mkdir(exist_ok=True)
            os.chmod(locks, 0o700)
            for path in self.directory.iterdir():
                if path.name.startswith(TEMPORARY):
                    self._remove_stale(path)
            self._ready = True

    def _remove_stale(self, path: Path) -> None:
        """Remove a leftover temporary directory unless an unpack of its image runs."""
        name = path.name[len(TEMPORARY) :]
        evicted = name.startswith("evict-")  # an eviction holds the lease lock, an unpack not
        key = name.removeprefix("evict-")[: len("sha256-") + 64]
        fd = self._lock_file(key, LEASE if evicted else UNPACK) if _valid_key(key) else None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            remove_tree(str(path))
            log.info("image cache: removed %s, left by an interrupted unpack", path.name)
        except (BlockingIOError, FileNotFoundError):
            pass
        finally:
            if fd is not None:
                os.close(fd)

    def _lock_file(self, key: str, kind: str = LEASE) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        return os.open(self.directory / LOCKS / f"{key}{kind}", flags, 0o600)

    def _cached(self, ref: ImageRef, source: ImageSource) -> Image:
        key = source.key.replace(":", "-")
        fd = self._lock_file(key)
        try:
            # the lease first: while it is held no eviction can take the image away
            fcntl.flock(fd, fcntl.LOCK_SH)
            info = self.directory / key / "image.json"
            if not info.exists():
                # unpackers of one image wait for each other on a lock of their own, never
                # for the leases of running tasks (a task would wait for another to end)
                unpacking = self._lock_file(key, UNPACK)
                try:
                    fcntl.flock(unpacking, fcntl.LOCK_EX)
                    if not info.exists():  # nobody unpacked it while this one waited
                        self._unpack(ref, source, key)
                finally:
                    os.close(unpacking)
            with contextlib.suppress(OSError):
                os.utime(info)  # its last use, for eviction
            return Image(ref, self.directory / key / "rootfs", _read_config(info), key, fd)
        except BaseException:
            os.close(fd)
            raise

    def _unpack(self, ref: ImageRef, source: ImageSource, key: str) -> None:
        """Unpack ``source`` into ``<cache>/<key>`` (exclusive lock held); on any failure
        nothing is left."""
        began = time.monotonic()
        temporary = self.directory / f"{TEMPORARY}{key}-{secrets.token_hex(4)}"
        temporary.mkdir(mode=0o700)
        try:
            rootfs = temporary / "rootfs"
            rootfs.mkdir(mode=0o700)
            unpacked = Unpacked(str(rootfs), limit=self.limit)
            for layer in source.layers:
                with layer.open() as blob:
                    apply_layer(unpacked, blob, layer.digest, layer.diff_id)
            unpacked.finish()
            os.chmod(rootfs, 0o755)
            info = {"source": ref.text, "size": unpacked.size, "config": source.config}
            (temporary / "image.json").write_text(json.dumps(info))
            os.chmod(temporary / "image.json", 0o644)
            os.chmod(temporary, 0o755)
            os.rename(temporary, self.directory / key)
        except LayerError as exc:
            remove_tree(str(temporary))
            raise ImageError(f"image {ref.text}: {exc}") from None
        except ImageSourceError as exc:
            remove_tree(str(temporary))
            raise ImageError(f"image {ref.text}: {exc}") from None
        except OSError as exc:
            remove_tree(str(temporary))
            raise ImageError(f"image {ref.text}: cannot unpack it: {_os_problem(exc)}") from None
        except BaseException:
            remove_tree(str(temporary))
            raise
        log.info(
            "image cache: unpacked %s as %s (%s bytes, %.1fs)",
            ref.text,
            key,
            f"{unpacked.size:,}",
            time.monotonic() - began,
        )
        self.evict(keep=key)


def default_cache_dir(home: Path) -> Path:
    """Where an agent keeps images: outside its private home when it is root (the tasks'
    accounts must reach them), else in it."""
    if os.geteuid() == 0:
        return Path("/var/lib/corral/images")
    return home / "images"


def _read_config(info: Path) -> dict[str, Any]:
    try:
        config = json.loads(info.read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return {}
    return config if isinstance(config, dict) else {}


def _valid_key(key: str) -> bool:
    hexa = key.removeprefix("sha256-")
    return (
        key.startswith("sha256-") and len(hexa) == 64 and all(c in "0123456789abcdef" for c in hexa)
    )


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return f"not found: {exc.filename}" if exc.filename else "not found"
    what = exc.strerror or str(exc)
    return f"{what}: {exc.filename}" if exc.filename else what
