"""Credentials for a host: the ssh-agent, the identity file, and a secret kept in the OS keyring.

This is the only module that imports :mod:`keyring`. A secret stored under the service
``remote-bash`` with the host's inventory name as the user name is used as the passphrase of
the host's identity file, or as the login password when the host has no identity file.

It must never block a connection: every keyring call runs on a daemon thread with a deadline,
and a keyring that is missing, locked or broken is reported once (one ``WARNING`` on the
``remote_bash.credentials`` logger) and then left alone, so connections fall back to the agent
and key files. Secrets are only ever handed to the SSH layer; nothing here writes them anywhere
but the keyring, and never into a backend that keeps them readable (base64 is not encryption)
unless the caller says so explicitly.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ._plain import Record
from ._ssh import Credentials
from .errors import CredentialError
from .models import Host

__all__ = [
    "AUDIT_KEY_NAME",
    "KEYRING_TIMEOUT",
    "SERVICE",
    "StoredSecret",
    "acredentials_for",
    "aget_secret",
    "audit_key_lookup",
    "backend_kind",
    "credentials_for",
    "delete_secret",
    "describe_backend",
    "get_secret",
    "key_is_encrypted",
    "keyring_problem",
    "reset_keyring_state",
    "set_secret",
]

SERVICE = "remote-bash"
"""The keyring service name secrets are stored under."""
KEYRING_TIMEOUT = 5.0
"""Seconds a keyring lookup may take before it is given up (a locked keyring may wait for a prompt)."""
STORE_TIMEOUT = 30.0
"""Seconds ``set_secret``/``delete_secret`` wait: a person may be unlocking the keyring."""

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

_ADVICE = (
    "install and configure a keyring backend that encrypts (for a headless machine: pip install "
    "keyrings.cryptfile, and set PYTHON_KEYRING_BACKEND=keyrings.cryptfile.cryptfile.CryptFileKeyring)"
)

# Backends known to keep secrets encrypted at rest (by the OS, a desktop secret service, or a
# keyring password). Matched against the backend's class and its bases, nearest first.
_ENCRYPTING = frozenset({
    "keyring.backends.SecretService.Keyring",
    "keyring.backends.libsecret.Keyring",
    "keyring.backends.kwallet.DBusKeyring",
    "keyring.backends.macOS.Keyring",
    "keyring.backends.Windows.WinVaultKeyring",
    "keyrings.alt.file.EncryptedKeyring",
    "keyrings.cryptfile.cryptfile.CryptFileKeyring",
})
# Backends that store the secret readable by anyone who can read their file (base64 is not
# encryption), or that store nothing at all.
_READABLE = frozenset({
    "keyrings.alt.file.PlaintextKeyring",
    "keyrings.alt.pyfs.PlaintextKeyring",
    "keyrings.cryptfile.file.PlaintextKeyring",
})
_STORES_NOTHING = frozenset({"keyring.backends.fail.Keyring", "keyring.backends.null.Keyring"})


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def backend_kind(backend: object) -> str:
    """``encrypting``, ``readable``, ``nothing`` (stores nothing) or ``unknown``, for one backend."""
    for cls in type(backend).__mro__:
        name = _class_name(cls)
        if name in _STORES_NOTHING:
            return "nothing"
        if name in _READABLE:
            return "readable"
        if name in _ENCRYPTING:
            return "encrypting"
    return "unknown"


def describe_backend(backend: object) -> str:
    """The backend's class, and its file when it keeps one (what ``credentials set`` reports)."""
    path = getattr(backend, "file_path", None)
    return _class_name(type(backend)) + (f" (file {path})" if isinstance(path, str) else "")


class _State:
    """The process-wide verdict on the keyring: once it failed, it is not asked again."""

    lock = threading.Lock()
    problem: str | None = None
    reported = False


def keyring_problem() -> str | None:
    """Why the keyring was found unusable in this process, or None if it has not failed."""
    return _State.problem


def reset_keyring_state() -> None:
    """Forget an earlier keyring failure, so the next lookup asks the keyring again."""
    with _State.lock:
        _State.problem = None
        _State.reported = False


def _give_up(problem: str) -> None:
    with _State.lock:
        if _State.problem is None:
            _State.problem = problem
        if _State.reported:
            return
        _State.reported = True
    _log.warning("%s; using ssh-agent and key files only. To use stored secrets, %s", problem, _ADVICE)


def _backend_problem() -> str | None:
    """Load the keyring backend; a sentence when it cannot store anything (runs on a thread)."""
    import keyring
    from keyring.backends import chainer, fail

    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring):
        return "no OS keyring backend is available"
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return "no OS keyring backend is available"
    return None


def _lookup(host_name: str) -> str | None:
    problem = _backend_problem()
    if problem:
        raise CredentialError(problem)
    import keyring

    secret = keyring.get_password(SERVICE, host_name)
    return secret or None


class StoredSecret(Record):
    """Where ``set_secret`` put a secret."""

    backend: str
    """The keyring backend's class, and its file when it keeps one."""
    encrypted: bool
    """Whether the backend is known to encrypt what it stores."""


def _store(host_name: str, secret: str | None, store_readable: bool) -> StoredSecret:
    problem = _backend_problem()
    if problem:
        raise CredentialError(f"{problem}, so nothing can be stored; {_ADVICE}", host=host_name)
    import keyring
    from keyring.backends import chainer
    from keyring.errors import PasswordDeleteError

    backend = keyring.get_keyring()
    if secret is None:
        try:
            keyring.delete_password(SERVICE, host_name)
        except PasswordDeleteError as exc:
            raise CredentialError(f"no secret is stored for {host_name!r}", host=host_name) from exc
        return StoredSecret(describe_backend(backend), backend_kind(backend) == "encrypting")
    # A chainer hands the secret to its first backend that takes it: store through each in turn
    # ourselves, so the one that is judged is the one that stores, and it can be named.
    candidates = list(backend.backends) if isinstance(backend, chainer.ChainerBackend) else [backend]
    for candidate in candidates:
        kind = backend_kind(candidate)
        named = describe_backend(candidate)
        if kind == "nothing":
            raise CredentialError(f"the keyring backend {named} stores nothing; {_ADVICE}", host=host_name)
        if kind != "encrypting" and not store_readable:
            why = ("stores secrets unencrypted (readable by anyone who can read its file)" if kind == "readable"
                   else "is not known to encrypt what it stores")
            raise CredentialError(
                f"the keyring backend {named} {why}, so the secret was not stored: {_ADVICE}; or pass "
                "--store-readable to store it there anyway", host=host_name,
            )
        try:
            candidate.set_password(SERVICE, host_name, secret)
        except NotImplementedError:
            continue
        return StoredSecret(named, kind == "encrypting")
    raise CredentialError(f"no keyring backend would store the secret; {_ADVICE}", host=host_name)


def _start(fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
    """Run ``fn`` on a daemon thread: one stuck on an unlock prompt never holds up exit."""
    future: concurrent.futures.Future[_T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)

    threading.Thread(target=work, daemon=True, name="remote-bash-keyring").start()
    return future


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | concurrent.futures.TimeoutError):
        return f"the OS keyring did not answer within {KEYRING_TIMEOUT:g} s (is it locked?)"
    if isinstance(exc, CredentialError):
        return exc.message
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"the OS keyring failed ({detail})"


def get_secret(host_name: str, *, timeout: float = KEYRING_TIMEOUT) -> str | None:
    """The secret stored for ``host_name``, or None (also when the keyring is unusable: reported once)."""
    if _State.problem is not None:
        return None
    try:
        return _start(lambda: _lookup(host_name)).result(timeout)
    except Exception as exc:
        _give_up(_failure(exc))
        return None


async def aget_secret(host_name: str) -> str | None:
    """:func:`get_secret` for async code: the event loop is never blocked."""
    if _State.problem is not None:
        return None
    try:
        lookup = asyncio.wrap_future(_start(lambda: _lookup(host_name)))
        return await asyncio.wait_for(lookup, KEYRING_TIMEOUT)
    except Exception as exc:
        _give_up(_failure(exc))
        return None


AUDIT_KEY_NAME = "audit:key"
"""The keyring user name of the audit key (':' never appears in a host name)."""


def audit_key_lookup() -> Callable[[], str | None]:
    """Start reading the audit key from the keyring now, so the read overlaps the connection; the
    returned function waits for it (``KEYRING_TIMEOUT`` at most) and gives the hex key or None.

    No usable keyring means no key, without a warning: most installs keep none. A keyring that
    fails or does not answer is reported like any other keyring failure.
    """
    if _State.problem is not None:
        return lambda: None
    future = _start(lambda: _lookup(AUDIT_KEY_NAME))

    def wait() -> str | None:
        try:
            return future.result(KEYRING_TIMEOUT)
        except CredentialError:
            return None
        except Exception as exc:
            _give_up(_failure(exc))
            return None

    return wait


def set_secret(host_name: str, secret: str, *, store_readable: bool = False) -> StoredSecret:
    """Store ``secret`` for ``host_name`` and return which keyring backend stored it.

    A backend that does not encrypt (or is not known to) is refused unless ``store_readable``;
    one that stores nothing always is. CredentialError says what to do when it cannot be stored.
    """
    if not secret:
        raise CredentialError("an empty secret cannot be stored", host=host_name)
    return _wait_store(host_name, secret, store_readable)


def delete_secret(host_name: str) -> StoredSecret:
    """Remove the secret of ``host_name``, returning the backend; CredentialError when there is
    none or the keyring fails."""
    return _wait_store(host_name, None, False)


def _wait_store(host_name: str, secret: str | None, store_readable: bool) -> StoredSecret:
    try:
        return _start(lambda: _store(host_name, secret, store_readable)).result(STORE_TIMEOUT)
    except CredentialError:
        raise
    except concurrent.futures.TimeoutError as exc:
        raise CredentialError(
            f"the OS keyring did not answer within {STORE_TIMEOUT:g} s (is it locked?)", host=host_name
        ) from exc
    except Exception as exc:
        raise CredentialError(f"{_failure(exc)}; {_ADVICE}", host=host_name) from exc


def _wants_secret(host: Host) -> bool:
    """Whether a keyring lookup could help: a password login, or a key that may be encrypted."""
    if host.credential == "agent":
        return False
    if host.identity_file is None:
        return host.credential in ("auto", "keyring")
    return key_is_encrypted(host.identity_file) is not False


def _assemble(host: Host, secret: str | None) -> Credentials:
    keys = [host.identity_file] if host.identity_file is not None and host.credential != "agent" else []
    return Credentials(
        use_agent=host.credential in ("auto", "agent"),
        key_files=keys,
        passphrase=secret if keys else None,
        password=secret if not keys else None,
    )


def credentials_for(host: Host) -> Credentials:
    """What to offer ``host``: the agent (``auto``/``agent``), its identity file, a keyring secret."""
    return _assemble(host, get_secret(host.name) if _wants_secret(host) else None)


async def acredentials_for(host: Host) -> Credentials:
    """:func:`credentials_for` for async code; what sessions take as ``credentials=``."""
    return _assemble(host, await aget_secret(host.name) if _wants_secret(host) else None)


_OPENSSH_MAGIC = b"openssh-key-v1\x00"


def key_is_encrypted(path: Path) -> bool | None:
    """True/False when the private key file's format says; None when unknown or unreadable."""
    try:
        text = path.expanduser().read_text("ascii", "replace")[:64 * 1024]
    except OSError:
        return None
    if "-----BEGIN OPENSSH PRIVATE KEY-----" in text:
        body = text.split("-----BEGIN OPENSSH PRIVATE KEY-----", 1)[1].split("-----END", 1)[0]
        try:
            blob = base64.b64decode("".join(body.split()))
        except (binascii.Error, ValueError):
            return None
        if not blob.startswith(_OPENSSH_MAGIC) or len(blob) < len(_OPENSSH_MAGIC) + 4:
            return None
        start = len(_OPENSSH_MAGIC) + 4
        size = int.from_bytes(blob[start - 4 : start], "big")
        return blob[start : start + size] != b"none"
    if "-----BEGIN ENCRYPTED PRIVATE KEY-----" in text or "Proc-Type: 4,ENCRYPTED" in text:
        return True
    if "PRIVATE KEY-----" in text:
        return False
    if text.startswith("PuTTY-User-Key-File"):
        return "Encryption: none" not in text
    return None
