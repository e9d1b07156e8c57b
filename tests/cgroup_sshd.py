"""A test sshd whose every login is put in a cgroup of its own, as pam_systemd does on systemd hosts.

The mechanism is root-owned, like systemd-logind's: sshd runs with ``UsePAM yes`` under a PAM
service of its own (OpenSSH names the service after the program, so sshd is started through a
symlink with a unique name), whose ``session`` phase runs a root-owned script through pam_exec.
The script moves the calling sshd process (the login's privileged monitor, forked before the
user's processes) into ``<root>/session-<pid>.scope`` of the cgroup v2 hierarchy, so every
process of that login, daemons included, lives there.

Needs root, pam_exec and a writable cgroup v2 mount; :func:`cgroup_support` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from remote_bash import sandbox
from remote_bash.models import Host
from remote_bash.sandbox import _sshd

from .sshd import TestHosts
from .waiting import wait_until

PAM_EXEC = ("/lib/x86_64-linux-gnu/security/pam_exec.so", "/usr/lib/x86_64-linux-gnu/security/pam_exec.so",
            "/lib/security/pam_exec.so", "/usr/lib64/security/pam_exec.so", "/usr/lib/security/pam_exec.so")


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or the hybrid ``.../unified``)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 "):
                return Path(left.split()[4])
    return None


def cgroup_support() -> str | None:
    """None when a per-login cgroup sshd can be set up here, else why not."""
    if os.geteuid() != 0:
        return "needs root (PAM service and cgroups)"
    if sandbox.find_sshd() is None:
        return "needs OpenSSH's sshd"
    if not any(Path(p).exists() for p in PAM_EXEC):
        return "needs pam_exec.so (libpam-modules)"
    mount = cgroup2_mount()
    if mount is None:
        return "needs a cgroup v2 mount"
    probe = mount / f"rbprobe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot create a cgroup under {mount}: {exc}"
    return None


@contextlib.contextmanager
def cgroup_sshd(hosts: TestHosts, name: str) -> Iterator[tuple[Host, Path]]:
    """Start an sshd named ``name`` whose logins each get ``<root>/session-<pid>.scope``; yields
    the host and the root cgroup. Everything is removed at the end, processes left in the
    cgroups included (through cgroup.kill)."""
    mount = cgroup2_mount()
    assert mount is not None
    tag = uuid.uuid4().hex[:10]
    service = f"rbcg{tag}"
    root = mount / f"remote-bash-test-{tag}"
    workdir = hosts.root / name
    workdir.mkdir(parents=True, exist_ok=True)
    hook = workdir / "login-cgroup.sh"
    hook.write_text(
        "#!/bin/sh\n"
        '[ "$PAM_TYPE" = open_session ] || exit 0\n'
        f"d='{root}'/session-$PPID.scope\n"
        'mkdir -p "$d" && echo "$PPID" > "$d/cgroup.procs"\n'
    )
    hook.chmod(0o755)
    pam_exec = next(p for p in PAM_EXEC if Path(p).exists())
    pam_file = Path("/etc/pam.d") / service
    link = workdir / service
    sshd = sandbox.find_sshd()
    assert sshd is not None
    root.mkdir()
    pam_file.write_text(
        "auth required pam_deny.so\n"
        "account required pam_permit.so\n"
        "password required pam_deny.so\n"
        f"session required {pam_exec} {hook}\n"
    )
    link.symlink_to(sshd)
    original = _sshd.find_sshd
    _sshd.find_sshd = lambda: str(link)  # the PAM service is named after the program
    try:
        try:
            host = hosts.start(name, extra_config=("UsePAM yes",))
        finally:
            _sshd.find_sshd = original
        yield host, root
    finally:
        server = hosts.servers.pop(name, None)
        if server is not None:
            server.stop()
        pam_file.unlink(missing_ok=True)
        _remove_tree(root)


def _remove_tree(root: Path) -> None:
    if not root.exists():
        return
    for child in sorted(root.iterdir()):
        if child.is_dir():
            with contextlib.suppress(OSError):
                (child / "cgroup.kill").write_text("1")

    def emptied() -> bool:
        # A killed cgroup can be removed once its last process is gone.
        for child in [c for c in root.iterdir() if c.is_dir()]:
            with contextlib.suppress(OSError):
                child.rmdir()
        return not any(c.is_dir() for c in root.iterdir())

    wait_until(emptied, within=10, what=f"the login cgroups under {root} to empty",
               show=lambda: sorted(c.name for c in root.iterdir() if c.is_dir()))
    with contextlib.suppress(OSError):
        root.rmdir()


def members(root: Path) -> list[int]:
    """Pids in every session cgroup under ``root``."""
    pids: list[int] = []
    for child in root.iterdir():
        procs = child / "cgroup.procs"
        if procs.exists():
            pids += [int(x) for x in procs.read_text().split()]
    return pids
