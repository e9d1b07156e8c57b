from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import settings

from remote_bash.models import Host
from remote_bash.session import RemoteBashSession

from .messages_server import MessagesServer
from .sshd import TestHosts, make_test_hosts

# On CI the property tests draw the same examples every run, with no per-example deadline, so a
# loaded machine cannot turn them red by chance; elsewhere they keep exploring new examples.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# The fixtures users get for their own tests (remote_host, remote_session), proven here daily;
# pytester to run a user's test file; the engine and image fixtures of the docker tests.
pytest_plugins = ["remote_bash.testing", "pytester", "tests.docker_env"]


@pytest.fixture(scope="session", autouse=True)
def _default_audit_dir() -> Iterator[Path]:
    """Sessions audit to the default directory unless told otherwise: in the tests, a private one,
    never the audit log of whoever runs them."""
    root = Path(tempfile.mkdtemp(prefix="rb-audit-"))
    previous = os.environ.get("REMOTE_BASH_AUDIT_DIR")
    os.environ["REMOTE_BASH_AUDIT_DIR"] = str(root / "audit")
    try:
        yield root / "audit"
    finally:
        if previous is None:
            os.environ.pop("REMOTE_BASH_AUDIT_DIR", None)
        else:
            os.environ["REMOTE_BASH_AUDIT_DIR"] = previous


@pytest.fixture(scope="session")
def hosts() -> Iterator[TestHosts]:
    root = Path(tempfile.mkdtemp(prefix="rb-sshd-"))
    os.chmod(root, 0o755)  # noqa: S103 - sshd reads authorized_keys here as the test user
    th = make_test_hosts(root)
    try:
        yield th
    finally:
        th.stop_all()


@pytest.fixture
def start_host(hosts: TestHosts) -> Iterator[Callable[..., Host]]:
    """Start a dedicated sshd (a test may kill its connections, or stop it); stopped after the test."""
    started: list[str] = []

    def start(label: str, **fields: Any) -> Host:
        name = f"rel-{label}-{uuid.uuid4().hex[:6]}"
        started.append(name)
        return hosts.start(name, **fields)

    yield start
    for name in started:
        hosts.servers[name].stop()


@pytest.fixture(scope="session")
def web1(hosts: TestHosts) -> Host:
    return hosts.start("web-1")


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    """A scripted Messages endpoint on loopback; it fails the test if a request broke the script."""
    with MessagesServer() as srv:
        yield srv
    assert not srv.problems, srv.problems


@pytest.fixture
def umask_000() -> Iterator[None]:
    """A umask that would make every file world-writable: what remote_bash creates must not be."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
async def client(server: MessagesServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The real anthropic SDK client, talking to the scripted endpoint, with no retries of its own."""
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0) as c:
        yield c


@pytest.fixture
async def session(web1: Host) -> AsyncIterator[RemoteBashSession]:
    async with RemoteBashSession(web1, kill_grace=0.5) as s:
        yield s


@pytest.fixture
def work(hosts: TestHosts) -> Iterator[Path]:
    """A fresh directory in the remote user's home, owned by that user (the hosts are this machine),
    removed afterwards."""
    user = pwd.getpwnam(hosts.user)
    path = Path(user.pw_dir) / f"rbwork-{uuid.uuid4().hex[:10]}"
    path.mkdir()
    os.chown(path, user.pw_uid, user.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)
