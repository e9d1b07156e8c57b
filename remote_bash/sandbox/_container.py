"""The container sandbox backend: sshd in a throwaway container of the project's own image.

The image is built from the Dockerfile shipped in the package (``remote_bash/data``) on first use
and cached under a tag that carries the package version and a digest of the build files, so an
upgrade rebuilds it and nothing else does. Each sandbox is one container with a fresh host key,
a throwaway client key, its port published on 127.0.0.1 only, removed on stop. Nothing of the
operator's is mounted or passed in but the public key. All engine calls go through ``_engine``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from remote_bash.errors import ConfigError

from ._engine import Engine

__all__ = ["BUILD_FILES", "IMAGE_REPOSITORY", "SandboxContainer", "ensure_image", "image_tag", "start_container"]

IMAGE_REPOSITORY = "remote-bash-sandbox"
BUILD_FILES = ("Dockerfile", "setup.sh", "entrypoint.sh", "sshd_config")
LOGIN_USER = "agent"
SSH_PORT = 22
READY_DEADLINE = 60.0
"""How long a new container's sshd may take to greet (the image's first container on a slow disk)."""


@dataclass(frozen=True)
class SandboxContainer:
    """A running sandbox container: where its sshd answers, and the host key it presents."""

    engine: Engine
    container: str
    image: str
    port: int
    host_key: str
    user: str = LOGIN_USER


def _build_file(name: str) -> bytes:
    return resources.files("remote_bash").joinpath(f"data/{name}").read_bytes()


def image_tag(base: str | None = None) -> str:
    """``remote-bash-sandbox:<version>-<digest>``: the version, the build files and the base image."""
    from remote_bash import __version__

    digest = hashlib.sha256()
    for name in BUILD_FILES:
        digest.update(name.encode() + b"\0" + _build_file(name) + b"\0")
    digest.update((base or "").encode())
    suffix = "" if base is None else "-" + re.sub(r"[^a-z0-9_.-]+", "-", base.lower()).strip("-.")[:40]
    return f"{IMAGE_REPOSITORY}:{__version__}-{digest.hexdigest()[:12]}{suffix}"


def ensure_image(engine: Engine, base: str | None = None, *,
                 progress: Callable[[str], None] | None = None) -> str:
    """The sandbox image's tag, built now when the engine does not have it yet.

    ``base`` builds on another image instead of Debian's: one with sshd is used as it is, one
    without gets OpenSSH from its package manager (apt-get, apk or dnf).
    """
    tag = image_tag(base)
    if engine.image_exists(tag):
        return tag
    if progress is not None:
        progress(f"building the sandbox image {tag} with {engine.name} (first use only; a minute or two)")
    build_args = {} if base is None else {"BASE": base, "PACKAGES": ""}
    with tempfile.TemporaryDirectory(prefix="remote-bash-image-") as context:
        for name in BUILD_FILES:
            (Path(context) / name).write_bytes(_build_file(name))
        engine.build(Path(context), tag, build_args=build_args)
    return tag


def start_container(engine: Engine, image: str, public_key: str) -> SandboxContainer:
    """A detached container of ``image`` whose sshd accepts ``public_key``; it is removed if it fails."""
    name = f"remote-bash-sandbox-{secrets.token_hex(4)}"
    container = engine.start(image, name=name, labels={"remote-bash": "sandbox"},
                             env={"AUTHORIZED_KEYS": public_key.strip()}, publish=SSH_PORT)
    try:
        port = engine.published_port(container, SSH_PORT)
        _wait_for_banner(engine, container, port)
        key = engine.read_file(container, "/etc/ssh/ssh_host_ed25519_key.pub").split()
        if len(key) < 2:
            raise ConfigError(f"{engine.name}: container {name} has no ed25519 host key")
        return SandboxContainer(engine=engine, container=container, image=image, port=port,
                                host_key=f"{key[0]} {key[1]}")
    except BaseException:
        with contextlib.suppress(ConfigError):
            engine.remove(container)
        raise


def _wait_for_banner(engine: Engine, container: str, port: int) -> None:
    """Until sshd greets on the published port: the engine's proxy accepts before sshd listens."""
    end = time.monotonic() + READY_DEADLINE
    last = "no answer"
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.settimeout(max(0.5, min(5.0, end - time.monotonic())))
                if sock.recv(64).startswith(b"SSH-"):
                    return
                last = "the connection closed without an SSH greeting"
        except OSError as exc:
            last = str(exc)
        if not engine.running(container):
            raise ConfigError(f"{engine.name}: the sandbox container exited: {engine.logs(container) or last}")
        time.sleep(0.2)
    raise ConfigError(f"{engine.name}: the sandbox container's sshd did not answer on 127.0.0.1:{port} within "
                      f"{READY_DEADLINE:.0f} s ({last}); its log: {engine.logs(container)}")
