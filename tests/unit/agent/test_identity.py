"""Tests for Unix accounts and for tasks that run as one (real accounts made with useradd)."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.agent.identity import (
    Account,
    AccountError,
    account_env,
    current_account,
    lookup_account,
    make_private_dir,
)
from corral.agent.supervisor import TaskState
from tests.unit.agent.helpers import MODES, cgroups_for
from tests.unit.agent.test_supervisor import Harness

pytestmark = [pytest.mark.timeout(120)]

as_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd"
)


def test_lookup_account_reads_the_password_and_group_databases() -> None:
    root = lookup_account("root")
    assert (root.uid, root.gid, root.home) == (0, 0, "/root")
    assert root.groups[0] == 0


def test_lookup_of_a_missing_account_says_so() -> None:
    with pytest.raises(AccountError) as caught:
        lookup_account("crl-nobody-here")
    assert isinstance(caught.value, LookupError)
    assert str(caught.value) == "no Unix account 'crl-nobody-here' on this node"


def test_current_account_and_its_environment() -> None:
    me = current_account()
    assert me.uid == os.geteuid()
    assert account_env(me) == {
        "HOME": me.home,
        "USER": me.name,
        "LOGNAME": me.name,
        "SHELL": me.shell or "/bin/sh",
    }
    assert Account.from_json(me.to_json()) == me


@pytest.fixture
def account() -> Iterator[Account]:
    """A fresh account with its home and one supplementary group; removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd")
    name, group = f"crl-t{secrets.token_hex(4)}", f"crl-g{secrets.token_hex(4)}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        subprocess.run(
            ["useradd", "-m", "-G", group, "-s", "/bin/sh", name], check=True, capture_output=True
        )
        try:
            yield lookup_account(name)
        finally:
            subprocess.run(["userdel", "-r", name], check=False, capture_output=True)
    finally:
        subprocess.run(["groupdel", group], check=False, capture_output=True)


@as_root
def test_make_private_dir_gives_it_to_the_account(account: Account, tmp_path: Path) -> None:
    path = make_private_dir(tmp_path / "a" / "b", account)
    info = path.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (
        account.uid,
        account.gid,
        0o700,
    )


@pytest.fixture
def secret() -> Iterator[Path]:
    """A root file, mode 0600, in a directory anyone may traverse."""
    directory = Path(f"/tmp/crl-secret-{uuid.uuid4().hex[:8]}")
    directory.mkdir(mode=0o755)
    path = directory / "secret"
    path.write_text("top secret\n")
    path.chmod(0o600)
    yield path
    shutil.rmtree(directory)


@pytest.fixture(params=MODES)
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    cgroups = cgroups_for(request.param)
    harness = Harness(tmp_path, cgroups)
    yield harness
    harness.sup.stop_all(grace_period=0, wait=True)
    if cgroups is not None:
        assert cgroups.remove_root()


@as_root
def test_task_runs_as_the_account(h: Harness, account: Account, secret: Path) -> None:
    script = f'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME $SHELL"; pwd; cat {secret}'
    launch = h.launch("u", script, env={"EXTRA": "1"})
    h.sup.start(replace(launch, account=account))
    status = h.wait_exited("u", timeout=30)
    out = h.log("u").splitlines()
    assert out[0] == str(account.uid)
    assert out[1] == str(account.gid)
    assert sorted(map(int, out[2].split())) == sorted(account.groups)
    assert len(account.groups) == 2  # its own group and the supplementary one
    assert out[3] == f"{account.home} {account.name} {account.name} /bin/sh"
    assert out[4] == account.home  # default working directory: its home
    assert "Permission denied" in out[5]
    assert status.exit_code == 1  # cat failed
    assert status.reason is None


@as_root
def test_account_by_name_is_looked_up_at_start(h: Harness, account: Account) -> None:
    h.sup.start(replace(h.launch("n", "id -un"), account=account.name))
    assert h.wait_exited("n", timeout=30).exit_code == 0
    assert h.log("n").strip() == account.name


@as_root
def test_workdir_the_account_cannot_enter_fails_126(h: Harness, account: Account) -> None:
    closed = h.tmp / "closed"
    closed.mkdir(mode=0o700)
    h.sup.start(replace(h.launch("w", "pwd", workdir=str(closed)), account=account))
    status = h.wait_exited("w", timeout=30)
    assert status.exit_code == 126
    assert h.log("w") == (
        f"corral: cannot start task: cannot enter working directory {closed} as {account.name}\n"
    )


def test_missing_account_exits_127_with_reason(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    status = h.sup.start(replace(h.launch("m", "true"), account="crl-no-such-user"))
    assert (status.state, status.exit_code, status.pid) == (TaskState.EXITED, 127, None)
    assert status.reason == "no Unix account 'crl-no-such-user' on this node"
    assert h.log("m") == f"corral: cannot start task: {status.reason}\n"


def test_launch_failure_is_reported_without_running(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    marker = tmp_path / "ran"
    status = h.sup.start(replace(h.launch("f", f"touch {marker}"), failure="no such account"))
    assert (status.state, status.exit_code, status.reason) == (
        TaskState.EXITED,
        127,
        "no such account",
    )
    assert not marker.exists()


def test_same_account_as_the_agent_only_sets_the_environment(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    me = replace(current_account(), home=str(tmp_path))
    h.sup.start(replace(h.launch("s", 'id -u; echo "$HOME"; pwd'), account=me))
    assert h.wait_exited("s").exit_code == 0
    assert h.log("s").split() == [str(os.geteuid()), str(tmp_path), os.getcwd()]
