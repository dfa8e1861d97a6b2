"""Container images made on the spot for tests and benchmarks (no registry is reachable):
a busybox-static root filesystem, its layers as tars, and the three image forms Corral
reads: an OCI image layout, an OCI archive (a tar of one) and a ``docker save`` archive.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

D = tarfile.DIRTYPE
BUSYBOX = shutil.which("busybox")
APPLETS = ("sh", "ls", "id", "df", "cat", "touch", "sleep", "mkdir", "echo", "stat", "env")
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"


def busybox_is_static() -> bool:
    """True if ``busybox`` runs without a C library (Debian's busybox-static)."""
    if BUSYBOX is None:
        return False
    ldd = shutil.which("ldd")
    if ldd is None:
        return True
    out = subprocess.run([ldd, BUSYBOX], capture_output=True, text=True)
    return "not a dynamic executable" in out.stdout + out.stderr or "statically" in out.stdout


def busybox_rootfs(path: Path) -> Path:
    """A root filesystem at ``path``: busybox and its applets in /bin, /etc/passwd, and
    the usual empty directories."""
    assert BUSYBOX is not None, "busybox-static is not installed"
    for name in ("bin", "etc", "tmp", "root", "data", "usr/share"):
        (path / name).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, path / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True).stdout.split()
    for name in set(applets) | set(APPLETS):
        link = path / "bin" / name
        if name != "busybox" and not link.exists():
            link.symlink_to("busybox")
    (path / "etc" / "passwd").write_text(PASSWD)
    (path / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (path / "usr" / "share" / "hello.txt").write_text("hello from the image\n")
    for directory, _dirs, files in os.walk(path):
        os.chmod(directory, 0o755)
        for name in files:
            target = Path(directory) / name
            if not target.is_symlink():
                os.chmod(target, 0o755 if name == "busybox" else 0o644)
    return path


def tar_of(root: Path) -> bytes:
    """An uncompressed layer tar of the tree at ``root`` (owned by root, fixed times)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                full = Path(directory) / name
                info = tar.gettarinfo(str(full), str(full.relative_to(root)))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 1_700_000_000
                if info.isreg():
                    with open(full, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
    return buffer.getvalue()


def tar_entries(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A layer tar of hand-made entries (for the unpacker's tests)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **extra: object):
    """One tar entry: ``kind`` a tarfile type (REGTYPE, DIRTYPE, SYMTYPE, LNKTYPE...)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.mtime = 1_700_000_000
    for key, value in extra.items():
        setattr(info, key, value)
    return info, (data if data is not None else (b"" if kind == tarfile.REGTYPE else None))


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_config(diff_ids: list[str], env: list[str] | None = None, workdir: str = "") -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env or ["PATH=/bin", "IMAGE_VAR=from-image"], "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    return json.dumps(config).encode()


def oci_layout(
    path: Path,
    layers: list[bytes],
    compress: bool = True,
    tag: str | None = "latest",
    env: list[str] | None = None,
    workdir: str = "",
) -> str:
    """Write an OCI image layout of ``layers`` (uncompressed tars, gzipped in it when
    ``compress``) at ``path``; returns the manifest's digest (the image's cache key)."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        name = digest(data)
        (blobs / name.removeprefix("sha256:")).write_bytes(data)
        return name

    descriptors = []
    for layer in layers:
        blob = gzip.compress(layer, compresslevel=1, mtime=0) if compress else layer
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        descriptors.append({"mediaType": media, "digest": put(blob), "size": len(blob)})
    config = image_config([digest(layer) for layer in layers], env, workdir)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": put(config),
                "size": len(config),
            },
            "layers": descriptors,
        }
    ).encode()
    manifest_digest = put(manifest)
    entry_ = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": manifest_digest,
        "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
    }
    if tag:
        entry_["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry_]}))
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return manifest_digest


def archive_of(directory: Path, path: Path) -> Path:
    """A tar of ``directory``'s contents (an OCI archive of a layout)."""
    with tarfile.open(path, "w") as tar:
        for item in sorted(directory.rglob("*")):
            tar.add(item, str(item.relative_to(directory)), recursive=False)
    return path


def oci_archive(path: Path, layers: list[bytes], **options: object) -> str:
    """Write an OCI archive of ``layers`` at ``path``; returns the image's key."""
    layout = path.with_name(path.name + ".layout")
    key = oci_layout(layout, layers, **options)  # type: ignore[arg-type]
    archive_of(layout, path)
    shutil.rmtree(layout)
    return key


def docker_archive(path: Path, layers: list[bytes], env: list[str] | None = None) -> str:
    """Write what ``docker save`` writes for an image of ``layers`` (uncompressed); returns
    the image's key (its config's digest)."""
    buffer_files: dict[str, bytes] = {}
    names = []
    for layer in layers:
        name = f"{digest(layer).removeprefix('sha256:')}/layer.tar"
        buffer_files[name] = layer
        names.append(name)
    config = image_config([digest(layer) for layer in layers], env)
    config_name = digest(config).removeprefix("sha256:") + ".json"
    buffer_files[config_name] = config
    manifest = [{"Config": config_name, "RepoTags": ["test/busybox:latest"], "Layers": names}]
    buffer_files["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in buffer_files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return digest(config)
