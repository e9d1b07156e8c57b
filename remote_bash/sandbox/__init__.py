"""Throwaway SSH hosts: the built-in ``sandbox`` host and the sshd the test fixtures start.

Modules, lowest first: ``_sshd`` (OpenSSH's sshd on loopback, clean environment), ``_engine``
(the only module that drives a container engine), ``_container`` and ``_local`` (the two isolating
backends), ``_lifecycle`` (choose, start, find and stop the sandbox; its state file). Nothing here
prints or reads argv: that is the CLI's job.
"""

from ._engine import Engine, find_engine
from ._lifecycle import (
    SANDBOX,
    Backend,
    SandboxInfo,
    abandoned,
    choose_backend,
    half_stopped,
    running,
    sandbox_dir,
    sandbox_for_command,
    start,
    stop,
    stop_abandoned,
)
from ._sshd import SshdServer, clean_environment, find_sshd, generate_keypair, shared_sshd_config, start_sshd

__all__ = [
    "SANDBOX",
    "Backend",
    "Engine",
    "SandboxInfo",
    "SshdServer",
    "abandoned",
    "choose_backend",
    "clean_environment",
    "find_engine",
    "find_sshd",
    "generate_keypair",
    "half_stopped",
    "running",
    "sandbox_dir",
    "sandbox_for_command",
    "shared_sshd_config",
    "start",
    "start_sshd",
    "stop",
    "stop_abandoned",
]
