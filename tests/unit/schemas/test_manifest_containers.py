"""The container fields of a manifest: image, mounts, shm_size (refused with the field)."""

from __future__ import annotations

import pytest

from corral.core.container import Mount
from corral.errors import ValidationError
from corral.schemas.manifest import load_manifest, parse_manifest


def test_a_job_in_an_image_with_mounts_and_shm() -> None:
    manifest = load_manifest(
        """
        command: python train.py
        image: oci-archive:/images/pytorch.tar
        mounts: ["/datasets/imagenet:/data:ro", "/scratch"]
        shm_size: 16GB
        workdir: /scratch/run
        """
    )
    spec = manifest.to_spec()
    assert spec.image == "oci-archive:/images/pytorch.tar"
    assert spec.mounts == (
        Mount("/datasets/imagenet", "/data", True),
        Mount("/scratch", "/scratch", False),
    )
    assert spec.shm_size == 16 * 10**9 and spec.workdir == "/scratch/run"
    # stored as given; a job without them stores none of them
    dumped = manifest.model_dump(mode="json", exclude_none=True)
    assert dumped["mounts"] == ["/datasets/imagenet:/data:ro", "/scratch"]
    plain = parse_manifest({"command": "x"}).model_dump(mode="json", exclude_none=True)
    assert not {"image", "mounts", "shm_size"} & set(plain)
    assert parse_manifest({"command": "x"}).to_spec().mounts == ()


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"mounts": ["/data"]}, "mounts: only with an image"),
        ({"shm_size": "1GB"}, "shm_size: only with an image"),
        ({"image": "/rootfs", "shm_size": 0}, "shm_size: must be positive"),
        ({"image": "/rootfs", "shm_size": "lots"}, "shm_size"),
        ({"image": "oci-archive:x.tar"}, "image: .*absolute"),
        ({"image": "/rootfs", "mounts": ["/proc"]}, "mounts: .*system path"),
        ({"image": "/rootfs", "mounts": ["/d:/dev"]}, "mounts: .*system path"),
        ({"image": "/rootfs", "mounts": ["relative:/data"]}, "mounts: .*absolute"),
        ({"image": "/rootfs", "mounts": ["/a:/d", "/b:/d"]}, "mounts: /d is mounted twice"),
        ({"image": "/rootfs", "mounts": "/data"}, "mounts"),
        ({"image": "/rootfs", "workdir": "run"}, "workdir .*absolute"),
    ],
)
def test_bad_container_fields(fields: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        parse_manifest({"command": "x", **fields})
