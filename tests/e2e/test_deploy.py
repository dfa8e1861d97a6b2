"""deploy/: the systemd units and the example environment files, checked against the CLI
(`systemd-analyze verify` where it is installed), and a server and an agent configured by
environment files alone, as the units run them: HTTPS, a join token from a file, a
rotation of the join token, and an agent restart that leaves its task running and
re-adopts it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from corral.cli.main import app
from corral.client import Client
from corral.errors import AuthenticationError
from tests.e2e.cluster import free_port, pid_alive, wait_for
from tests.integration.test_tls import self_signed

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = {"corral-server.service": "server", "corral-agent.service": "agent"}
ENV_FILES = {"server.env.example": "server", "agent.env.example": "agent"}
READ_BY_EVERY_COMMAND = {"CORRAL_HOME"}  # corral_home(): the state directory
INSTALLED = "/usr/local/bin/corral"  # the units' ExecStart (docs/deploy.md)
# systemd before 254 does not know this key (and ignores it, as the unit's comment says)
TOLERATED = re.compile(r"Unknown key '?DelegateSubgroup'? in section '?\[?Service\]?'?")


def envvars(command: str) -> dict[str, str | None]:
    """The environment variable of each option of ``corral COMMAND`` (None: none)."""
    params = get_command(app).commands[command].params  # type: ignore[attr-defined]
    options = [p for p in params if p.param_type_name == "option" and p.name != "help"]
    return {o.opts[0]: o.envvar for o in options}


def named_in(path: Path) -> set[str]:
    """The CORRAL_* variables an environment file sets, commented-out examples included."""
    return set(re.findall(r"^#?\s*(CORRAL_[A-Z0-9_]+)=", path.read_text(), re.MULTILINE))


def read_env_file(path: Path) -> dict[str, str]:
    """``VARIABLE=value`` lines as systemd's EnvironmentFile= reads them (comments skipped)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, sep, value = line.partition("=")
            assert sep and key.strip() == key, f"{path.name}: not VARIABLE=value: {line!r}"
            pairs[key] = value
    return pairs


def unit_settings(path: Path) -> list[tuple[str, str]]:
    return [
        (key, value)
        for key, sep, value in (line.partition("=") for line in path.read_text().splitlines())
        if sep and not key.startswith(("#", ";", "["))
    ]


def test_every_server_and_agent_option_is_also_an_environment_variable() -> None:
    for command in ("server", "agent"):
        options = envvars(command)
        assert "--server" in options or command == "server"
        missing = [flag for flag, var in options.items() if not var]
        assert not missing, f"corral {command}: options without an envvar: {missing}"
        assert all(str(var).startswith("CORRAL_") for var in options.values())
    # the meanings that existed before the units keep their names
    assert envvars("agent")["--server"] == "CORRAL_SERVER"
    assert envvars("agent")["--join-token"] == "CORRAL_JOIN_TOKEN"
    assert envvars("agent")["--ca-cert"] == "CORRAL_CA_CERT"
    assert envvars("server")["--db"] == "CORRAL_DB"


def test_help_shows_the_environment_variables() -> None:
    from typer.testing import CliRunner

    for command in ("server", "agent"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0
        text = " ".join(result.output.split())  # (help text wraps wherever it likes)
        for var in envvars(command).values():
            assert f"env var: {var}" in text


@pytest.mark.parametrize("name", sorted(ENV_FILES))
def test_env_files_name_only_variables_the_command_reads(name: str) -> None:
    command = ENV_FILES[name]
    known = {v for v in envvars(command).values() if v} | READ_BY_EVERY_COMMAND
    named = named_in(DEPLOY / name)
    assert named - known == set(), f"{name} names variables `corral {command}` ignores"
    assert named >= {"CORRAL_SERVER", "CORRAL_JOIN_TOKEN"} or command == "server"
    assert "CORRAL_DB" in named or command == "agent"
    read_env_file(DEPLOY / name)  # every line that is not a comment is VARIABLE=value


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_units_run_the_command_with_settings_from_the_environment(unit: str) -> None:
    command = UNITS[unit]
    settings = unit_settings(DEPLOY / unit)
    values = dict(settings)
    # nothing secret (nor anything else) on the command line: every setting is in the
    # environment, which only root and the service's account can read
    assert values["ExecStart"] == f"{INSTALLED} {command}"
    assert values["EnvironmentFile"] == f"/etc/corral/{command}.env"
    known = {v for v in envvars(command).values() if v} | READ_BY_EVERY_COMMAND
    for key, value in settings:
        if key == "Environment":
            assert value.split("=", 1)[0] in known, value
    assert values["Restart"] == "on-failure"
    assert values["Environment"].startswith("CORRAL_") and values["StateDirectory"]
    home = next(v for k, v in settings if k == "Environment" and v.startswith("CORRAL_HOME="))
    assert home == f"CORRAL_HOME=/var/lib/{values['StateDirectory']}"
    if command == "server":
        assert values["User"] == "corral"
    else:  # root (no User=); stopping the agent leaves its tasks to the next start
        assert "User" not in values and values["KillMode"] == "process"
        assert ("Environment", "CORRAL_KEEP_TASKS_ON_STOP=1") in settings
        assert values["Delegate"] == "yes"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at an executable here
    program = tmp_path / "corral"
    program.write_text("#!/bin/sh\nexec true\n")
    program.chmod(0o755)
    for unit in UNITS:
        text = (DEPLOY / unit).read_text()
        assert INSTALLED in text
        (tmp_path / unit).write_text(text.replace(INSTALLED, str(program)))
    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / unit) for unit in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and not TOLERATED.search(line)
    ]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="no systemd-sysusers")
def test_the_sysusers_file_makes_the_server_account(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    for name in ("passwd", "group", "shadow", "gshadow"):
        (tmp_path / "etc" / name).touch()
    subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(DEPLOY / "corral.sysusers")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    (entry,) = (tmp_path / "etc" / "passwd").read_text().splitlines()
    name, _, _, _, _, home, shell = entry.split(":")
    assert (name, home, shell) == ("corral", "/var/lib/corral/server", "/usr/sbin/nologin")


# Records its pid, then exits with 3 once the file argv[2] appears.
WAITER = r"""
import os, sys, time
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
sys.exit(3)
"""


def write_env_file(path: Path, settings: dict[str, str]) -> Path:
    path.write_text(
        "# as in deploy/*.env.example\n" + "".join(f"{k}={v}\n" for k, v in settings.items())
    )
    path.chmod(0o600)
    return path


def daemon(command: str, home: Path, env_file: Path, log: Path) -> subprocess.Popen:
    """``corral COMMAND`` with no arguments, as its unit runs it: the unit's CORRAL_HOME,
    then the environment file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update({"CORRAL_HOME": str(home), "PYTHONUNBUFFERED": "1"}, **read_env_file(env_file))
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "corral", command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_server_and_an_agent_configured_by_environment_files_alone(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    server_home, agent_home = tmp_path / "server", tmp_path / "agent"
    db = f"sqlite:///{server_home / 'corral.db'}"
    if backend == "postgresql":
        db = request.getfixturevalue("postgres_server").new_database()
    server_env = write_env_file(
        tmp_path / "server.env",
        {
            "CORRAL_DB": db,
            "CORRAL_HOST": "127.0.0.1",
            "CORRAL_PORT": str(port),
            "CORRAL_TLS_CERT": str(cert),
            "CORRAL_TLS_KEY": str(key),
            "CORRAL_ADVERTISE": url,
            "CORRAL_SYNC_INTERVAL": "0.5",
            "CORRAL_NODE_TIMEOUT": "30",
            "CORRAL_ALLOW_ROOT_JOBS": "1",  # the admin token is this account's (root in CI)
        },
    )
    agent_env = write_env_file(
        tmp_path / "agent.env",
        {
            "CORRAL_SERVER": f"https://127.0.0.1:{free_port()},{url}",  # a dead replica first
            "CORRAL_JOIN_TOKEN_FILE": str(server_home / "join-token"),
            "CORRAL_CA_CERT": str(cert),
            "CORRAL_CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
            "CORRAL_NODE_NAME": "env-node",
            "CORRAL_SIMULATE": "4xH100",
            "CORRAL_LABELS": "pool=env",
            "CORRAL_KEEP_TASKS_ON_STOP": "1",  # as corral-agent.service sets it
        },
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    server = agent = None
    pid = None
    go = tmp_path / "go"
    try:
        server = daemon("server", server_home, server_env, logs / "server.log")

        def healthy() -> bool:
            assert server.poll() is None, (logs / "server.log").read_text()
            with contextlib.suppress(Exception):
                return Client(url, "-", ca_cert=cert).health().status == "ok"
            return False

        wait_for(healthy, 30, "the server to answer over HTTPS")
        wait_for(lambda: (server_home / "token").exists(), 10, "the admin token")
        client = Client(url, (server_home / "token").read_text().strip(), ca_cert=cert)
        wait_for(lambda: client.health().leader_address == url, 30, "the advertised leader")

        agent = daemon("agent", agent_home, agent_env, logs / "agent.log")
        node = wait_for(
            lambda: next((n for n in client.nodes() if n.state == "ready"), None),
            30,
            "the node to register",
        )
        assert (node.name, node.labels, node.address) == ("env-node", {"pool": "env"}, "127.0.0.1")
        assert (agent_home / "agents" / "env-node").is_dir()

        job = client.submit(
            {
                "resources": {"gpus": 2},
                "command": [sys.executable, "-c", WAITER, str(tmp_path / "pid"), str(go)],
                "grace_period": "1s",
            }
        )
        wait_for(lambda: (tmp_path / "pid").exists(), 30, "the task to start")
        pid = int((tmp_path / "pid").read_text())

        # the join token rotated (docs/deploy.md): a new one in agent.env, the first revoked
        fresh = client.create_token("agents", role="join")
        (first,) = [t for t in client.tokens() if t.role == "join" and t.id != fresh.id]
        client.revoke_token(first.id)
        old_secret = (server_home / "join-token").read_text().strip()
        with pytest.raises(AuthenticationError, match="revoked"):
            Client(url, old_secret, ca_cert=cert).whoami()
        settings = read_env_file(agent_env)
        del settings["CORRAL_JOIN_TOKEN_FILE"]
        write_env_file(agent_env, {**settings, "CORRAL_JOIN_TOKEN": fresh.token})

        # `systemctl restart corral-agent`: SIGTERM to the agent alone, then a new start
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=20) == 0
        assert pid_alive(pid), "the task died with its agent"
        assert "1 task(s) keep running" in (logs / "agent.log").read_text()
        agent = daemon("agent", agent_home, agent_env, logs / "agent.log")
        wait_for(
            lambda: "re-adopted task" in (logs / "agent.log").read_text(), 30, "the re-adoption"
        )
        running = client.get(job.id)
        assert (running.state, running.attempt) == ("running", 0)
        wait_for(
            lambda: (logs / "agent.log").read_text().count("registered node env-node") == 2,
            30,
            "the agent to register again, with the new join token",
        )
        assert pid_alive(pid)

        go.touch()
        ended = wait_for(
            lambda: (j := client.get(job.id)).state in ("succeeded", "failed") and j, 30, "the end"
        )
        assert (ended.state, ended.exit_code, ended.attempt) == ("failed", 3, 0)
        assert "--join-token is visible" not in (logs / "agent.log").read_text()
    finally:
        go.touch()
        stop(agent)
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        stop(server)
