"""docker/ and the container sandbox against a real engine: build the image, start the lab, use it.

The lab is docker/compose.yaml as shipped (three hosts, db-1 reached only through web-1), started
with ``docker compose`` or Debian's ``docker-compose`` under a project name of its own, on free
ports of 127.0.0.1, and torn down at the end (the image stays cached for the next run). Without an
engine every test here is skipped with the way to run them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from remote_bash import RemoteBashSession, fleet
from remote_bash.access import Gate
from remote_bash.inventory import Inventory, load_inventory
from remote_bash.sandbox import Engine, generate_keypair
from remote_bash.sandbox._container import image_tag

from .docker_env import engine_or_reason
from .waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
ENGINE, WHY_SKIPPED = engine_or_reason()

pytestmark = [pytest.mark.docker, pytest.mark.skipif(ENGINE is None, reason=WHY_SKIPPED)]


def compose_command(engine: Engine) -> list[str] | None:
    """``docker compose`` (the plugin) when it answers, else ``docker-compose`` / ``podman-compose``."""
    plugin = subprocess.run([engine.command, "compose", "version"], capture_output=True, check=False, timeout=30)
    if plugin.returncode == 0:
        return [engine.command, "compose"]
    standalone = shutil.which("docker-compose" if engine.name == "docker" else "podman-compose")
    return [standalone] if standalone else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Lab:
    engine: Engine
    project: str
    inventory: Inventory
    containers: dict[str, str]
    """Service name -> container id."""


@pytest.fixture(scope="session")
def image(sandbox_image: str) -> str:
    return sandbox_image


@pytest.fixture(scope="session")
def lab(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    assert ENGINE is not None
    compose = compose_command(ENGINE)
    if compose is None:
        pytest.skip("no compose: install the compose plugin or docker-compose (Debian: apt-get install docker-compose)")
    work = tmp_path_factory.mktemp("lab")
    key = generate_keypair(work / "id_ed25519", "remote-bash-lab")
    ports = {"web-1": free_port(), "web-2": free_port()}
    project = f"rb-lab-{uuid.uuid4().hex[:8]}"
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "RB_IMAGE": image,
           "RB_AUTHORIZED_KEY": key.with_suffix(".pub").read_text().strip(),
           "RB_WEB1_PORT": str(ports["web-1"]), "RB_WEB2_PORT": str(ports["web-2"])}
    base = [*compose, "-p", project, "-f", str(ROOT / "docker" / "compose.yaml")]

    def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)

    try:
        up = run("up", "-d", "--no-build")
        assert up.returncode == 0, up.stderr
        containers = {}
        for service in ("web-1", "web-2", "db-1"):
            found = run("ps", "-q", service, timeout=60).stdout.split()
            assert found, f"compose started no {service}: {run('ps', timeout=60).stdout}"
            containers[service] = found[0]
        known = [_wait_host_key(ENGINE, containers[s], f"[127.0.0.1]:{ports[s]}") for s in ("web-1", "web-2")]
        known.append(_wait_host_key(ENGINE, containers["db-1"], "db-1"))
        (work / "known_hosts").write_text("".join(known))
        # The shipped inventory, on this run's ports, with strict host keys (the keys are known).
        data = yaml.safe_load((ROOT / "docker" / "hosts.yaml").read_text())
        data["defaults"]["host_key_policy"] = "strict"
        for service, port in ports.items():
            data["hosts"][service]["port"] = port
        (work / "hosts.yaml").write_text(yaml.safe_dump(data))
        yield Lab(ENGINE, project, load_inventory(work / "hosts.yaml"), containers)
    finally:
        down = run("down", "--volumes", "--remove-orphans", "--timeout", "5")
        assert down.returncode == 0, down.stderr


def _wait_host_key(engine: Engine, container: str, name: str, within: float = 60) -> str:
    """The container's host key as a known_hosts line, once sshd has made it and greets."""
    script = "pgrep -x sshd >/dev/null && cat /etc/ssh/ssh_host_ed25519_key.pub"

    def greeting() -> str:
        done = engine.run("exec", container, "sh", "-c", script, check=False)
        return done.stdout if done.returncode == 0 and done.stdout.startswith("ssh-ed25519") else ""

    kind, key = wait_until(greeting, within=within, what=f"container {container[:12]} to run sshd",
                           show=lambda: engine.logs(container)).split()[:2]
    return f"{name} {kind} {key}\n"


# -- the image ---------------------------------------------------------------------------------------


def test_image_is_tagged_with_the_package_version_and_runs_sshd_as_a_non_root_user(image: str) -> None:
    from remote_bash import __version__

    assert image == image_tag()
    assert image.startswith(f"remote-bash-sandbox:{__version__}-")
    assert ENGINE is not None
    assert ENGINE.image_exists(image)
    script = "id -u agent; for c in sshd bash ps; do command -v $c; done; ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l"
    probe = ENGINE.run("run", "--rm", "--entrypoint", "sh", image, "-c", script)
    uid, sshd, bash, ps, host_keys = probe.stdout.split()
    assert int(uid) > 0
    assert sshd.endswith("sshd") and bash.endswith("bash") and ps.endswith("ps")
    assert host_keys == "0"  # no key baked in: each container makes its own


# -- the lab -----------------------------------------------------------------------------------------


async def test_lab_session_keeps_state_between_calls(lab: Lab) -> None:
    async with RemoteBashSession(lab.inventory.host("web-2")) as s:
        assert (await s.run("cd /tmp && export RB_X=42 && f() { echo \"f:$1\"; }")).exit_code == 0
        r = await s.run('pwd; echo "$RB_X"; f ok; hostname; id -un')
        assert r.output.split() == ["/tmp", "42", "f:ok", "web-2", "agent"]


async def test_lab_timeout_kills_the_process_tree_under_the_containers_init(lab: Lab) -> None:
    async with RemoteBashSession(lab.inventory.host("web-1"), kill_grace=0.5) as s:
        init = (await s.run("cat /proc/1/comm")).output.strip()
        assert init in ("docker-init", "tini", "catatonit"), init
        r = await s.run("sh -c 'sleep 301 & (sleep 302 &) ; sleep 303'", timeout=2)
        assert r.timed_out
        assert r.kill is not None and r.kill.survivors == 0
        assert (await s.run("echo alive")).output == "alive\n"  # the shell survived, with its state
    left = lab.engine.run("exec", lab.containers["web-1"], "ps", "-eo", "args").stdout
    assert not [line for line in left.splitlines() if line.startswith("sleep 30")], left


async def test_lab_db_is_reached_only_through_the_jump_host(lab: Lab) -> None:
    published = lab.engine.run("port", lab.containers["db-1"], check=False).stdout
    assert published.strip() == ""
    async with RemoteBashSession(lab.inventory.hosts["db-1"], gate=Gate(lab.inventory, "lab")) as s:
        r = await s.run("hostname; id -un")
        assert r.output.split() == ["db-1", "agent"]
    result = await fleet.exec(lab.inventory, "lab", "hostname")
    assert sorted((r.host, r.status, r.first_line) for r in result.results) == [
        ("db-1", "ok", "db-1"), ("web-1", "ok", "web-1"), ("web-2", "ok", "web-2")]


# -- the container sandbox with another image -------------------------------------------------------------


def test_sandbox_image_option_puts_sshd_into_an_image_without_it(tmp_path: Path) -> None:
    """``--image debian:bookworm-slim`` (no sshd in it): OpenSSH comes from Debian's packages."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home),
           "XDG_STATE_HOME": str(home / "state"), "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}
    cli = [sys.executable, "-m", "remote_bash.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
                              stdin=subprocess.DEVNULL, check=False)

    try:
        started = run("sandbox", "start", "--backend", "container", "--image", "debian:bookworm-slim")
        assert started.returncode == 0, started.stderr
        assert "remote-bash-sandbox:" in started.stdout and "debian-bookworm-slim" in started.stdout
        out = run("exec", "--", ". /etc/os-release; echo $VERSION_CODENAME; id -un")
        assert (out.returncode, out.stdout) == (0, "bookworm\nagent\n"), out.stderr
    finally:
        assert run("sandbox", "stop").returncode == 0
