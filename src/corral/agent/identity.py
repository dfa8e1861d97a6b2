"""Unix accounts that tasks run as: lookup, the login environment, private directories."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AccountError(LookupError):
    """The named Unix account does not exist on this node."""


@dataclass(frozen=True)
class Account:
    """A Unix account: ``groups`` holds every group id it belongs to, primary one included."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uid": self.uid,
            "gid": self.gid,
            "groups": list(self.groups),
            "home": self.home,
            "shell": self.shell,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Account:
        return cls(
            name=str(data["name"]),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            groups=tuple(int(g) for g in data["groups"]),
            home=str(data["home"]),
            shell=str(data["shell"]),
        )


def lookup_account(name: str) -> Account:
    """The account called ``name``, with its supplementary groups; AccountError if none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise AccountError(f"no Unix account {name!r} on this node") from None
    return _from_pwd(entry)


def current_account() -> Account:
    """The account this process runs as (its effective uid)."""
    return _from_pwd(pwd.getpwuid(os.geteuid()))


def account_env(account: Account) -> dict[str, str]:
    """The login variables a process of ``account`` expects: HOME, USER, LOGNAME, SHELL."""
    return {
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": account.shell or "/bin/sh",
    }


def make_private_dir(path: Path, account: Account | None = None) -> Path:
    """``mkdir -p path``, then make it ``account``'s (if given) with mode 0700; returns ``path``.

    Only ``path`` itself is chowned, not the parents it creates. Through a descriptor opened
    without following links: a link planted at ``path`` is refused (OSError), never
    followed by a root agent.
    """
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if account is not None:
            os.fchown(fd, account.uid, account.gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def _from_pwd(entry: pwd.struct_passwd) -> Account:
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    ordered = tuple(dict.fromkeys([entry.pw_gid, *groups]))
    return Account(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=ordered,
        home=entry.pw_dir,
        shell=entry.pw_shell,
    )
