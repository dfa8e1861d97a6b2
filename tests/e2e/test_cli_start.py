"""``corral submit``, ``jobs`` and ``show`` against a real server import only what they use
(issue 21, a CLI that starts fast): never the control plane, the simulator, gRPC or torch;
not httpx's own CLI (click, Pygments); ``submit``, which prints an id, no Rich; ``jobs``
and ``show``, which send no manifest, no YAML. Module sets, not times: the times are
``bench/cli_start.py``'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster import LocalCluster
from tests.unit.cli.test_import_budget import SERVER_SIDE, among, main_with, modules_after

NOT_EVER = (*SERVER_SIDE, "click", "pygments")


@pytest.mark.cluster_options(nodes=[])
def test_commands_import_only_what_they_use(cluster: LocalCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text("name: small\ncommand: [sleep, '1']\nresources:\n  gpus: 1\n")
    env = {**cluster.env, "CORRAL_SERVER": cluster.url}

    submitted = modules_after(main_with("submit", "-f", str(manifest)), env)
    assert among(submitted, (*NOT_EVER, "rich")) == []
    assert {"corral.schemas.manifest", "httpx"} <= set(submitted)  # checked here, then sent
    job = cluster.client().list()[0]
    assert job.name == "small"

    for argv in (["jobs"], ["show", str(job.id)]):
        found = modules_after(main_with(*argv), env)
        assert among(found, (*NOT_EVER, "yaml", "corral.schemas.manifest")) == [], argv
        assert "rich" in found  # a table, a panel
