"""Fan-out: one command, or a task for Claude, on many hosts at once, each host in its own persistent session.

::

    result = await fleet.exec(inventory, "web:&prod", "df -h /", forks=20, timeout=30)
    print(fleet.format_recap(result))

    done = await fleet.run(inventory, "web", "free up disk space under /var/log", serial=2)
    print(fleet.format_run_recap(done))

Every selected host gets its own :class:`~remote_bash.session.RemoteBashSession`, made through the
inventory's gate (:class:`~remote_bash.access.Gate`: the host and every hop of its route are
checked before anything is connected), so its own timeout, command policy, limits and audit trail
apply. At most ``forks`` hosts are worked on at once, and at most ``inventory.group_forks[g]``
hosts of a group ``g``. A slow, unreachable or failing host only ever shows up as its own result:
it never stalls or aborts the others.

``fleet run`` gives each host its own conversation (the built-in bash tool), or with
``coordinator=True`` one conversation for them all through :class:`HostBashTool` (the custom tool
``remote_bash``, whose input names the host). A host's result is ``ok`` when its conversation ended
with Claude's own ``end_turn`` and the last command run on that host was not an error.

The modules, each importing only those above it: ``results`` (the models), ``pool`` (sessions,
slots, :func:`exec`), ``recap`` (text and files), ``host_tool``, ``conversation`` (what the
conversations share), ``per_host``, ``coordinator``, ``runner`` (:func:`run`). This package never
prints or reads argv: the CLI does that with :func:`format_recap` and :func:`write_output_dir`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .pool import FleetPool, SessionFactory, exec, fleet_exec
from .recap import format_recap, format_run_recap, write_output_dir, write_run_output_dir
from .results import (
    Conversation,
    FleetProgress,
    FleetResult,
    FleetRun,
    HostResult,
    HostRun,
    OutputGroup,
)

if TYPE_CHECKING:
    from .host_tool import HostBashTool
    from .runner import run

# The conversations' side (the tools, approval, the runner) is imported on first use: ``fleet exec``
# never needs it, and a command line should not pay for it at start.
_LAZY = {"HostBashTool": "host_tool", "run": "runner"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Conversation",
    "FleetPool",
    "FleetProgress",
    "FleetResult",
    "FleetRun",
    "HostBashTool",
    "HostResult",
    "HostRun",
    "OutputGroup",
    "SessionFactory",
    "exec",
    "fleet_exec",
    "format_recap",
    "format_run_recap",
    "run",
    "write_output_dir",
    "write_run_output_dir",
]
