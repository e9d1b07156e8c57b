"""A pytest plugin with a throwaway SSH host for your own tests.

Enable it in a ``conftest.py`` (``pytest_plugins = ["remote_bash.testing"]``) or on the command
line (``pytest -p remote_bash.testing``); it needs pytest and pytest-asyncio. It gives two fixtures:

- ``remote_host`` (one per test session): a :class:`~remote_bash.models.Host` for a sandbox that
  runs in a container when Docker or Podman answers; without one, an sshd on 127.0.0.1 for a
  throwaway unprivileged user when the tests run as root, in bubblewrap when it is installed, else
  for the (unprivileged) user running them. ``--remote-bash-backend`` or ``$REMOTE_BASH_SANDBOX``
  names the backend instead.
- ``remote_session``: an open :class:`~remote_bash.session.RemoteBashSession` on it, a fresh
  shell for each test.

Everything the host needs (keys, known_hosts, state) lives in a temporary directory and is removed
with the host at the end of the session. The plugin never touches the operator's own sandbox.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from remote_bash.models import Host
from remote_bash.sandbox import find_engine, sandbox_for_command
from remote_bash.session import RemoteBashSession

__all__ = ["default_backend", "remote_host", "remote_session"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--remote-bash-backend", choices=["container", "local", "unisolated"], default=None,
                     help="backend of the remote_host fixture (default: container when Docker or Podman "
                          "answers, else local as root, else unisolated as the unprivileged user running pytest)")


def default_backend() -> str:
    """container when an engine answers; else local (a throwaway user as root, bubblewrap otherwise); else
    the unprivileged user running pytest."""
    named = os.environ.get("REMOTE_BASH_SANDBOX")
    if named:
        return named
    if find_engine() is not None:
        return "container"
    # Without root or bubblewrap the local backend refuses; a test run by an unprivileged user may
    # then use that user's own account: it is already unprivileged.
    return "local" if os.geteuid() == 0 or shutil.which("bwrap") else "unisolated"


@pytest.fixture(scope="session")
def remote_host(request: pytest.FixtureRequest) -> Iterator[Host]:
    """A throwaway SSH host for the whole test session, removed at its end."""
    backend = request.config.getoption("--remote-bash-backend") or default_backend()
    with tempfile.TemporaryDirectory(prefix="remote-bash-testing-") as root:
        # The sandbox's state and keys live here, not in the operator's own sandbox directory.
        env = {"HOME": root, "XDG_STATE_HOME": str(Path(root) / "state")}
        with sandbox_for_command(env, backend, private_paths=[Path(root)]) as host:
            yield host


@pytest_asyncio.fixture  # not pytest.fixture: pytest-asyncio's strict mode skips those when async
async def remote_session(remote_host: Host) -> AsyncIterator[RemoteBashSession]:
    """An open session on ``remote_host``: a fresh persistent bash for each test."""
    async with RemoteBashSession(remote_host) as session:
        yield session
