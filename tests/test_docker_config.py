"""The image and the Docker lab (docker/) checked without an engine (tests/test_docker.py builds them).

What is checked: the Dockerfile builds on every Docker in use (no heredocs, no syntax= frontend),
the image runs the sshd settings the tests run, the example inventory loads and matches the
compose hosts, and every published port is bound to 127.0.0.1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from remote_bash.access import Gate, jump_chain
from remote_bash.inventory import load_inventory
from remote_bash.sandbox import SshdServer, shared_sshd_config

from .sshd import TestHosts

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DATA = ROOT / "remote_bash" / "data"
DOCKERFILE = DATA / "Dockerfile"
SHARED = "remote_bash/data/sshd_config"
PER_RUN = ("ListenAddress", "HostKey", "PidFile", "AuthorizedKeysFile", "AllowUsers")
"""Keywords whoever starts sshd writes before the shared settings (sandbox.start_sshd)."""


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    out: list[tuple[str, str]] = []
    lines = iter(DOCKERFILE.read_text().splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def compose() -> dict[str, Any]:
    # As compose reads it with none of the variables set: ${NAME:-default} becomes the default.
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", (DOCKER / "compose.yaml").read_text())
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def bind_address(port: Any) -> str:
    """The host address a compose ``ports`` entry binds; "" means every interface."""
    if isinstance(port, dict):
        return str(port.get("host_ip", ""))
    parts = str(port).rsplit(":", 2)
    return parts[0].strip("[]") if len(parts) == 3 else ""


def published_port(port: Any) -> int | None:
    if isinstance(port, dict):
        return int(port["published"]) if "published" in port else None
    parts = str(port).rsplit(":", 2)
    return int(parts[-2]) if len(parts) >= 2 else None


# -- the image --------------------------------------------------------------------------------------


def test_dockerfile_builds_with_the_classic_builder_of_docker_20_10() -> None:
    text = DOCKERFILE.read_text()
    assert not re.search(r"^#\s*syntax=", text, re.M), "a syntax= line makes the engine fetch a frontend"
    assert "<<" not in text, "heredocs need BuildKit"
    for word, args in dockerfile_instructions():
        assert word in {"ARG", "FROM", "COPY", "RUN", "ENV", "EXPOSE", "ENTRYPOINT", "CMD"}, word
        assert "--chmod" not in args and "--mount" not in args, (word, args)


def test_image_is_debian_slim_and_installs_the_shared_sshd_config() -> None:
    steps = dockerfile_instructions()
    assert ("ARG", "BASE=debian:bookworm-slim") in steps
    assert ("FROM", "${BASE}") in steps
    copies = [args.split() for word, args in steps if word == "COPY"]
    assert copies == [["setup.sh", "entrypoint.sh", "sshd_config", "/usr/local/lib/remote-bash/"]]
    for name in copies[0][:-1]:
        assert (DATA / name).is_file(), name
    setup = (DATA / "setup.sh").read_text()
    assert 'cp "$here/sshd_config" /etc/ssh/sshd_config' in setup
    assert "apt-get install -y --no-install-recommends openssh-server bash procps" in setup
    for other in ("apk add", "dnf install"):
        assert other in setup  # --image with a base that lacks sshd


def test_image_changes_no_shared_setting_and_allows_no_password_or_root() -> None:
    setup = (DATA / "setup.sh").read_text()
    entry = (DATA / "entrypoint.sh").read_text()
    # The shared file is used as is: nothing edits it after the copy.
    assert "sed" not in setup.split("cp \"$here/sshd_config\"")[1]
    flags = re.findall(r'-o "?(\w+)=', entry)
    assert flags
    assert set(flags) <= set(PER_RUN), flags
    clean = re.search(r'exec env -i PATH=\S+ LANG=C.UTF-8 \\\n\s+"\$sshd" -D -e', entry)
    assert clean, "sshd's environment is not clean"
    shared = shared_sshd_config()
    for line in ("PasswordAuthentication no", "PermitRootLogin no", "KbdInteractiveAuthentication no",
                 "PermitEmptyPasswords no", "PubkeyAuthentication yes"):
        assert re.search(rf"^{line}$", shared, re.M), line
    starts, sessions = (re.search(rf"^{k} (\S+)$", shared, re.M) for k in ("MaxStartups", "MaxSessions"))
    assert starts
    assert int(starts.group(1).split(":")[0]) > 10  # sshd's default is 10
    assert sessions
    assert int(sessions.group(1)) > 10
    # A non-root user with no usable password, keys only at run time, host keys per container.
    assert 'useradd --create-home --shell "$bash_path" "$user"' in setup
    assert "usermod --password '*'" in setup
    assert "rm -f /etc/ssh/ssh_host_*" in setup
    assert "AUTHORIZED_KEYS" in entry
    assert "/run/authorized_keys" in entry
    assert "ssh-keygen -q -t ed25519" in entry


@pytest.mark.parametrize("script", ["setup.sh", "entrypoint.sh"])
def test_build_scripts_are_valid_sh(script: str) -> None:
    path = DATA / script
    assert path.read_text().startswith("#!/bin/sh\n")
    checked = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


@pytest.fixture(scope="module")
def fixture_sshd(hosts: TestHosts) -> SshdServer:
    """An sshd started by the test fixture, as every session test starts one."""
    if "docker-cfg" not in hosts.servers:
        hosts.start("docker-cfg")
    return hosts.servers["docker-cfg"]


def test_fixture_sshd_runs_exactly_the_shared_settings(fixture_sshd: SshdServer) -> None:
    server = fixture_sshd
    written = (server.workdir / f"sshd_config-{server.port}").read_text()
    shared = (ROOT / SHARED).read_text()
    assert shared == shared_sshd_config()
    assert written.endswith(shared)
    head = written[: -len(shared)].splitlines()
    assert [line.split()[0] for line in head] == list(PER_RUN)


def _effective(args: list[str]) -> dict[str, str]:
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=30)
    assert out.returncode == 0, out.stderr
    settings: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        settings[key] = f"{settings[key]}\n{value}" if key in settings else value
    return settings


def test_image_and_fixture_sshd_agree_on_every_effective_setting(fixture_sshd: SshdServer) -> None:
    """``sshd -T`` of the fixture's config against the image's (shared file plus the entrypoint's
    -o flags): they differ only in the per-run settings."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        pytest.skip("OpenSSH sshd is not installed")
    server = fixture_sshd
    key = server.workdir / "ssh_host_ed25519_key"
    fixture = _effective([sshd, "-T", "-f", str(server.workdir / f"sshd_config-{server.port}")])
    image = _effective([sshd, "-T", "-f", str(ROOT / SHARED), "-o", f"HostKey={key}",
                        "-o", "AllowUsers=agent", "-o", "AuthorizedKeysFile=.ssh/authorized_keys"])
    per_run = {k.lower() for k in PER_RUN} | {"port", "addressfamily"}
    assert len(fixture) > 50
    differ = sorted(k for k in fixture.keys() | image.keys()
                    if k not in per_run and fixture.get(k) != image.get(k))
    assert differ == [], {k: (fixture.get(k), image.get(k)) for k in differ}
    assert image["maxsessions"] == "200"
    assert image["passwordauthentication"] == "no"


# -- compose and the example inventory ----------------------------------------------------------------


def test_compose_publishes_only_on_loopback() -> None:
    services = compose()["services"]
    assert len(services) >= 3
    published = 0
    for name, service in services.items():
        for port in service.get("ports", []):
            assert bind_address(port) == "127.0.0.1", f"{name}: {port!r} is not bound to 127.0.0.1"
            published += 1
        assert "network_mode" not in service, f"{name} must stay on the private network"
    assert published >= 2


def test_compose_builds_the_sandbox_image_from_the_package() -> None:
    data = compose()
    assert "name" not in data, "docker-compose 1.29 (Debian) rejects a top-level name"
    for name, service in data["services"].items():
        build = service["build"]
        assert (DOCKER / build["context"]).resolve() == DATA, name
        assert "dockerfile" not in build
        assert service["init"] is True
        assert service.get("networks"), f"{name} is on no private network"


def test_example_inventory_matches_the_compose_hosts() -> None:
    inventory = load_inventory(DOCKER / "hosts.yaml")
    services = compose()["services"]
    assert list(inventory.hosts) == ["web-1", "web-2", "db-1"]
    assert inventory.groups == {"web": ["web-1", "web-2"], "lab": ["db-1", "web-1", "web-2"]}
    ports = {
        published_port(port): name for name, service in services.items() for port in service.get("ports", [])
    }
    for host in inventory.hosts.values():
        assert host.user == "agent"
        assert host.labels["env"] == "lab"
        assert host.identity_file == DOCKER / "id_ed25519"
        assert host.known_hosts == DOCKER / "known_hosts"
        if host.jump:
            continue
        assert host.hostname == "127.0.0.1"
        assert ports.get(host.port) == host.name, f"{host.name}: port {host.port} is not published by compose"
    db = inventory.host("db-1")
    assert db.jump == ["web-1"]
    assert db.port == 22
    assert db.hostname in services
    assert not services[db.hostname].get("ports")
    assert set(services[db.hostname]["networks"]) & set(services["web-1"]["networks"])
    assert [h.name for h in jump_chain(inventory, db)] == ["web-1"]
    assert [h.name for h in inventory.select("role=web")] == ["web-1", "web-2"]
    gate = Gate(inventory, "lab")
    assert gate.problem(db) is None
    assert gate.problem(inventory.host("web-1"), "jump host") is None
    assert Gate(inventory, "db-1").problem(inventory.host("web-1"), "jump host") is not None
