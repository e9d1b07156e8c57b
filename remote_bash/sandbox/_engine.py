"""The container engine: Docker or Podman, driven through its command-line client.

The only module that talks to a container engine. It runs the ``docker`` or ``podman`` client as
a subprocess, every call with a deadline, and turns a failure into a ConfigError that names the
engine, the step and the engine's own words. It never publishes a port beyond 127.0.0.1 and never
passes the caller's environment into a container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from remote_bash.errors import ConfigError

__all__ = ["ENGINES", "Engine", "engine_named", "find_engine"]

ENGINES = ("docker", "podman")
PROBE_TIMEOUT = 10.0
"""How long an engine may take to say it runs before it counts as absent."""


@dataclass(frozen=True)
class Engine:
    """A container engine that answered: ``command`` is the client's path, ``name`` docker or podman."""

    name: str
    command: str
    version: str

    def run(self, *args: str, timeout: float = 60.0, check: bool = True,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``<engine> args...``; raises ConfigError on a non-zero status (when ``check``) or the deadline."""
        try:
            done = subprocess.run([self.command, *args], capture_output=True, text=True, timeout=timeout,
                                  check=False, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                                  env=_client_environment())
        except subprocess.TimeoutExpired as exc:
            raise ConfigError(f"{self.name} {args[0]} did not finish within {timeout:.0f} s; "
                              f"is the {self.name} engine responsive ('{self.name} info')?") from exc
        except OSError as exc:
            raise ConfigError(f"{self.name} {args[0]}: cannot run {self.command}: {exc}") from exc
        if check and done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip())[-800:] or f"exit status {done.returncode}"
            raise ConfigError(f"{self.name} {args[0]} failed: {said}")
        return done

    def image_exists(self, image: str) -> bool:
        return self.run("image", "inspect", image, timeout=30, check=False).returncode == 0

    def build(self, context: Path, tag: str, *, build_args: dict[str, str] | None = None,
              timeout: float = 1800.0) -> None:
        """Build ``context``'s Dockerfile as ``tag`` (classic builder syntax only: no heredocs)."""
        argv = ["build", "--tag", tag, "--label", "remote-bash=image"]
        for key, value in (build_args or {}).items():
            argv += ["--build-arg", f"{key}={value}"]
        self.run(*argv, str(context), timeout=timeout)

    def start(self, image: str, *, name: str, labels: dict[str, str], env: dict[str, str],
              publish: int, args: Sequence[str] = ()) -> str:
        """Start a detached container, port ``publish`` on a random port of 127.0.0.1; its id."""
        argv = ["run", "--detach", "--init", "--name", name, "--publish", f"127.0.0.1::{publish}",
                "--security-opt", "no-new-privileges"]
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        for key in env:
            argv += ["--env", key]  # the value comes from the client's environment, not argv (ps)
        done = subprocess.run([self.command, *argv, image, *args], capture_output=True, text=True, timeout=120,
                              check=False, stdin=subprocess.DEVNULL, env={**_client_environment(), **env})
        if done.returncode != 0:
            raise ConfigError(f"{self.name} run {image} failed: {done.stderr.strip()[-800:]}")
        return done.stdout.strip().splitlines()[-1]

    def published_port(self, container: str, port: int) -> int:
        out = self.run("port", container, f"{port}/tcp", timeout=30).stdout
        for line in out.splitlines():
            address, _, number = line.strip().rpartition(":")
            if address == "127.0.0.1" and number.isdigit():
                return int(number)
        raise ConfigError(f"{self.name}: container {container[:12]} publishes no 127.0.0.1 port for {port}: {out!r}")

    def running(self, container: str) -> bool:
        done = self.run("inspect", "--format", "{{.State.Running}}", container, timeout=30, check=False)
        return done.returncode == 0 and done.stdout.strip() == "true"

    def read_file(self, container: str, path: str) -> str:
        return self.run("exec", container, "cat", path, timeout=30).stdout

    def logs(self, container: str) -> str:
        done = self.run("logs", "--tail", "20", container, timeout=30, check=False)
        return (done.stdout + done.stderr).strip()

    def remove(self, container: str) -> None:
        """Stop and delete a container; one that is already gone is fine."""
        done = self.run("rm", "--force", container, timeout=60, check=False)
        if done.returncode != 0 and "no such container" not in done.stderr.lower():
            raise ConfigError(f"{self.name} rm {container[:12]} failed: {done.stderr.strip()}")


def _client_environment() -> dict[str, str]:
    """What the engine's client needs to find its engine; nothing else of the caller's goes along."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
            "DOCKER_TLS_VERIFY", "CONTAINER_HOST", "CONTAINERS_CONF", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME")
    return {k: v for k, v in os.environ.items() if k in keep}


def engine_named(name: str) -> Engine | None:
    """The client of engine ``name`` without asking the engine anything (for a container known to run)."""
    command = shutil.which(name) if name in ENGINES else None
    return Engine(name=name, command=command, version="") if command else None


def find_engine(preferred: str | None = None) -> Engine | None:
    """The first engine of ``ENGINES`` (or ``preferred``, or $REMOTE_BASH_ENGINE) whose engine answers."""
    names = [preferred or os.environ.get("REMOTE_BASH_ENGINE") or ""]
    names = [n for n in names if n] or list(ENGINES)
    for name in names:
        command = shutil.which(name)
        if command is None:
            continue
        # Docker's client answers for the daemon (.Server); Podman has no daemon to ask.
        field = "{{.Server.Version}}" if name == "docker" else "{{.Version}}"
        try:
            done = subprocess.run([command, "version", "--format", field], capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT, check=False, stdin=subprocess.DEVNULL,
                                  env=_client_environment())
        except (subprocess.TimeoutExpired, OSError):
            continue
        version = done.stdout.strip()
        if done.returncode == 0 and version and not version.startswith("<no value>"):
            return Engine(name=name, command=command, version=version)
    return None
