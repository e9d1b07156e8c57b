"""Benchmark: one edit through the text editor tool next to the same change through bash.

In one run, against local sshd hosts on loopback (one with the SFTP subsystem, one without),
each figure the median over N calls of one tool call, audited, as Claude's tool_use would run it:
  - EditTool str_replace over SFTP, and over the shell fallback (no SFTP subsystem),
  - the same change through BashTool: ``sed -i`` (one line), and a heredoc rewriting the file,
  - EditTool view of the whole file, next to BashTool ``cat -n``,
for a small config file (200 lines) and a larger one (about 1 MB).

Run: python bench/bench_edit.py [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote_bash import BashTool, EditTool, RemoteBashSession
from remote_bash.audit import AuditLog
from remote_bash.tool import MAX_COMMAND_CHARS
from tests.sshd import make_test_hosts


async def median_ms(calls: int, step: Callable[[int], Awaitable[dict[str, object]]]) -> float:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        result = await step(i)
        times.append(time.perf_counter() - start)
        if result["is_error"]:
            raise SystemExit(f"a benchmark call failed: {result['content']}")
    return statistics.median(times) * 1000


def use(name: str, tool_input: dict[str, object], i: int) -> dict[str, object]:
    return {"type": "tool_use", "id": f"toolu_b{i}", "name": name, "input": tool_input}


def _put(path: Path, body: str) -> None:
    path.write_text(body)
    owner = path.parent.stat()
    os.chown(path, owner.st_uid, owner.st_gid)


async def measure(label: str, path: Path, lines: int, calls: int, sftp: RemoteBashSession,
                  shell: RemoteBashSession) -> None:
    body = "".join(f"setting_{n:06d} = {'v' * 40}\n" for n in range(lines))
    _put(path, body)
    size = len(body.encode())
    target = f"setting_{lines // 2:06d} = "
    editor = "str_replace_based_edit_tool"

    def toggle(i: int) -> tuple[str, str]:
        a, b = f"{target}{'v' * 40}", f"{target}{'w' * 40}"
        return (a, b) if i % 2 == 0 else (b, a)

    def edit_with(session: RemoteBashSession) -> Callable[[int], Awaitable[dict[str, object]]]:
        tool = EditTool(session)

        async def step(i: int) -> dict[str, object]:
            old, new = toggle(i)
            return await tool.handle(use(editor, {"command": "str_replace", "path": str(path), "old_str": old,
                                                  "new_str": new}, i))
        return step

    bash = BashTool(sftp)

    async def sed(i: int) -> dict[str, object]:
        old, new = toggle(i)
        return await bash.handle(use("bash", {"command": f"sed -i 's/^{old}$/{new}/' {path}"}, i))

    async def heredoc(i: int) -> dict[str, object]:
        old, new = toggle(i)
        text = body.replace(old, new) if i % 2 == 0 else body  # what Claude would have to send back whole
        return await bash.handle(use("bash", {"command": f"cat > {path} <<'RB_EOF'\n{text}RB_EOF"}, i))

    view_tool = EditTool(sftp)

    async def view(i: int) -> dict[str, object]:
        return await view_tool.handle(use(editor, {"command": "view", "path": str(path)}, i))

    async def cat(i: int) -> dict[str, object]:
        return await bash.handle(use("bash", {"command": f"cat -n {path}"}, i))

    figures = {
        "edit str_replace (SFTP)": await median_ms(calls, edit_with(sftp)),
        "edit str_replace (shell fallback)": await median_ms(calls, edit_with(shell)),
        "bash sed -i": await median_ms(calls, sed),
    }
    if len(body) < MAX_COMMAND_CHARS:
        figures["bash heredoc (whole file)"] = await median_ms(max(calls // 4, 5), heredoc)
    else:
        print(f"  (a heredoc of the whole file is over the bash tool's {MAX_COMMAND_CHARS:,}-character limit)")
    if size <= 256 * 1024:
        figures["edit view (SFTP)"] = await median_ms(calls, view)
        figures["bash cat -n"] = await median_ms(calls, cat)
    reference = figures["bash sed -i"]
    print(f"\n{label}: {lines} lines, {size:,} bytes; median of {calls} calls")
    for name, ms in figures.items():
        print(f"  {name:<36} {ms:8.2f} ms   {ms / reference:5.2f}x sed -i")


async def main(calls: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="rb-bench-edit-"))
    os.chmod(root, 0o755)  # noqa: S103 - sshd reads authorized_keys here as the test user
    hosts = make_test_hosts(root)
    from remote_bash.sandbox import start_sshd

    sandbox = sys.modules[start_sshd.__module__]  # where start_sshd looks the config up
    original = sandbox.shared_sshd_config
    try:
        with_sftp = hosts.start("bench-sftp")
        sandbox.shared_sshd_config = lambda: "".join(
            line for line in original().splitlines(keepends=True) if not line.startswith("Subsystem sftp"))
        without = hosts.start("bench-nosftp")
        sandbox.shared_sshd_config = original
        audit = AuditLog(root / "audit")
        home = Path(pwd.getpwnam(hosts.user).pw_dir)
        work = home / f"rb-bench-edit-{os.getpid()}"
        work.mkdir(exist_ok=True)
        os.chown(work, pwd.getpwnam(hosts.user).pw_uid, pwd.getpwnam(hosts.user).pw_gid)
        async with RemoteBashSession(with_sftp, audit=audit) as a, RemoteBashSession(without, audit=audit) as b:
            await measure("small config", work / "small.conf", 200, calls, a, b)
            await measure("large file", work / "large.conf", 20_000, max(calls // 5, 10), a, b)
        for child in work.iterdir():
            child.unlink()
        work.rmdir()
    finally:
        sandbox.shared_sshd_config = original
        hosts.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    asyncio.run(main(parser.parse_args().calls))
