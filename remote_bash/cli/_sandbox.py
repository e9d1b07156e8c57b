"""``remote-bash sandbox start|stop|status``: the built-in ``sandbox`` host at the command line.

The sandbox's lifecycle lives in :mod:`remote_bash.sandbox`; this module only reads the options,
prints, and names the operator's private paths the sandbox must not reach.
"""

from __future__ import annotations

from ._context import _Context, _progress
from ._output import EXIT_NOT_RUNNING, PROG, _out, _out_json


def _cmd_sandbox(ctx: _Context) -> int:
    from remote_bash import sandbox

    action = ctx.args.action
    if action == "status":
        info = sandbox.running(ctx.env)
        half = None if info is not None else sandbox.half_stopped(ctx.env)
        left = sandbox.abandoned(ctx.env)
        if ctx.args.json:  # status only
            data: dict[str, object] = {"running": info is not None}
            if info is not None:
                data.update(vars(info), inventory=info.inventory_snippet())
            if half is not None:
                data.update(half_stopped=half.stopping, throwaway_user=half.throwaway_user)
            if left:
                data.update(abandoned=[vars(one) for one in left])
            _out_json(data, ascii_only=True)
            return 0 if info is not None else EXIT_NOT_RUNNING
        for one in left:
            _out(f"sandbox: abandoned one-off, backend {one.backend}: {one.where()} (the command that started it "
                 f"ended without removing it{': ' + one.stopping if one.stopping else ''})\n"
                 f"  remove: {PROG} sandbox stop\n")
        if half is not None:
            _out(f"sandbox: half-stopped, backend {half.backend}: {half.stopping}\n"
                 f"  finish: {PROG} sandbox stop\n")
        elif info is None:
            _out("sandbox: not running\n")
        else:
            _out(f"sandbox: running, backend {info.backend}: {info.where()}\n"
                 f"  reach it: {info.user}@{info.address} port {info.port}, key {info.identity_file}\n"
                 f"  as an inventory (valid while it runs):\n\n"
                 + "".join(f"    {line}\n" for line in info.inventory_snippet().splitlines()))
        return 0 if info is not None else EXIT_NOT_RUNNING
    if action == "stop":
        for one in sandbox.stop_abandoned(ctx.env):
            _out(f"sandbox: removed an abandoned one-off ({one.backend}: {one.where()})\n")
        info = sandbox.stop(ctx.env)
        _out("sandbox: not running\n" if info is None else f"sandbox: stopped ({info.backend}: {info.where()})\n")
        return 0
    for one in sandbox.stop_abandoned(ctx.env):
        _out(f"sandbox: removed an abandoned one-off ({one.backend}: {one.where()})\n")
    already = sandbox.running(ctx.env)
    if already is not None:
        _out(f"sandbox: already running, backend {already.backend}, {already.address} port {already.port}\n")
        return 0
    info = sandbox.start(ctx.env, ctx.args.backend, image=ctx.args.image, progress=_progress,
                         private_paths=ctx.private_paths())
    _out(f"sandbox: started, backend {info.backend}: {info.where()}, {info.user}@{info.address} port {info.port}\n"
         f"  try: {PROG} exec -- uname -a\n  stop: {PROG} sandbox stop\n")
    return 0
