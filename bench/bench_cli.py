"""Benchmark: the ``remote-bash`` command line as whole processes, each beside its reference, on real sshd.

Starts N OpenSSH sshd on loopback (127.0.0.2 ...) and, in one run, interleaving each pair call by
call (so whatever else the machine does weighs on both alike), times whole processes:

  exec HOST -- true            vs  a Python script doing asyncssh connect + run of ``true``
  exec --keep HOST -- true     vs  ``ssh`` through a warm ControlMaster socket (kept session warm), the
                               target row from a bare virtualenv (as pipx or a venv install runs it),
                               and again with this interpreter and its site hooks, beside its own start
  fleet exec --forks N all     vs  a Python script doing the asyncssh gather of connect + run on N hosts

``remote-bash`` runs as pip's console script runs it (the same generated wrapper, this
interpreter's own binary, never a shell shim such as pyenv's, this tree first on the path), with
the package's bytecode compiled as an install compiles it. The site hooks of the installation
(``.pth`` files that import something at every start) are listed, since every process pays them.
The floors say what is the interpreter's and what is ours: ``python -c pass`` with
this installation's site hooks, with ``-I`` and with ``-S`` (no site at all), a bare virtualenv of
the same interpreter with and without ``import re`` (all that pip's wrapper adds), the standard
library the kept-session client loads (imported alone in that virtualenv: the floor of any client
written this way), and ``main()`` of a kept call in-process.
Each line gives the median wall time over rounds (each round's median of its calls), the CPU time
of the process (user + system, its children included), and the ratio to its reference, with the
range of the rounds' ratios.

Each sshd runs in a PID namespace with its own /proc, as each host of a real fleet has its own
process table (``--shared-proc``: all on this machine's, where each session's close-time check also
reads every other host's processes, work that grows as N squared).

Run: python bench/bench_cli.py [--hosts 30] [--rounds 5] [--calls 5] [--shared-proc]
All traffic stays on loopback; every subprocess has a timeout.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sshd import TestHosts, make_test_hosts, own_proc_wrapper  # noqa: E402 -- after the path to the tree

TIMEOUT = 300
PYTHON = os.path.realpath(sys.executable)
"""The interpreter's binary, as pip's console scripts name it in their first line."""
CLIENT_STDLIB = "import re, _socket"
"""What a kept call's client loads of the standard library beyond the interpreter's built-in modules
(re for pip's wrapper; tests/test_keep.py holds the client to it)."""

# pip's generated console script, as installed for ``remote-bash = "remote_bash.cli:main"``.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from remote_bash.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""

ONE = """import asyncio, json, sys
import asyncssh
h = json.load(open(sys.argv[1]))[0]
async def main():
    async with asyncssh.connect(h["hostname"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                known_hosts=h["known_hosts"], agent_path=None, config=None) as conn:
        await conn.run("true", check=True)
asyncio.run(main())
"""

INSIDE = """import asyncio, json, statistics, sys, time
import asyncssh
from remote_bash import RemoteBashSession, load_inventory
h = json.load(open(sys.argv[1]))[0]
host = load_inventory(sys.argv[2]).hosts[h["name"]]
async def one():
    async with asyncssh.connect(h["hostname"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                known_hosts=h["known_hosts"], agent_path=None, config=None) as conn:
        await conn.run("true", check=True)
async def ours():
    async with RemoteBashSession(host, audit=False) as session:
        await session.run("true")
async def main():
    times = {one: [], ours: []}
    for _ in range(int(sys.argv[3])):
        for work in times:
            start = time.perf_counter()
            await work()
            times[work].append(time.perf_counter() - start)
    print(statistics.median(times[one]) * 1000, statistics.median(times[ours]) * 1000)
asyncio.run(main())
"""
"""The two sides of ``exec`` after their imports, in one process: connect + run against a session's
start + run + close, interleaved call by call."""

GATHER = """import asyncio, json, sys
import asyncssh
hosts = json.load(open(sys.argv[1]))
async def one(h):
    async with asyncssh.connect(h["hostname"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                known_hosts=h["known_hosts"], agent_path=None, config=None) as conn:
        return (await conn.run("uname -a", check=True)).stdout
async def main():
    outputs = await asyncio.gather(*(one(h) for h in hosts))
    assert all(o.startswith("Linux") for o in outputs)
    sys.stdout.write("".join(outputs))
asyncio.run(main())
"""


def site_hooks() -> list[str]:
    """The ``.pth`` files of this installation's site directories that run code at every start."""
    import site

    found = []
    for directory in [*site.getsitepackages(), site.getusersitepackages()]:
        for pth in sorted(Path(directory).glob("*.pth")) if Path(directory).is_dir() else []:
            code = "\n".join(line for line in pth.read_text(errors="replace").splitlines() if line.startswith("import"))
            names = dict.fromkeys(re.findall(r"(?:\bimport\s+|__import__\(')([\w.]+)", code))
            if code:
                found.append(f"{pth.name} (imports {', '.join(names)})")
    return found


def run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, its children included) of one whole process, which must succeed."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
        watchdog = threading.Timer(TIMEOUT, proc.kill)  # wait4 has no timeout of its own
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(command)[:200]} failed ({proc.returncode}): {err.read().decode()[-600:]}")
    return wall, usage.ru_utime + usage.ru_stime


def start_hosts(th: TestHosts, count: int) -> list[dict[str, object]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        hosts = list(pool.map(lambda i: th.start(f"h{i:03d}", address=f"127.0.0.{i + 2}"), range(count)))
    return [{"name": h.name, "hostname": h.hostname, "port": h.port, "user": h.user,
             "key": str(h.identity_file), "known_hosts": str(h.known_hosts)} for h in hosts]


def bare_venv(work: Path) -> Path:
    """A virtualenv of this interpreter with nothing installed but this tree's package (a link)."""
    venv = work / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
    (Path(site) / "remote_bash").symlink_to(ROOT / "remote_bash")
    script = venv / "bin" / "remote-bash"
    script.write_text(CONSOLE_SCRIPT.format(python=python))
    return script


def compare(title: str, pairs: dict[str, list[str]], env: dict[str, str], rounds: int, calls: int,
            target: float | None) -> dict[str, float]:
    """Times each method ``calls`` times per round, interleaved; the first method is the reference."""
    names = list(pairs)
    for command in pairs.values():
        run(command, env)  # warm the page cache and any kept session
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        wall_round: dict[str, list[float]] = {name: [] for name in names}
        cpu_round: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(calls):
            for name in names:
                wall, cpu = run(pairs[name], env)
                wall_round[name].append(wall)
                cpu_round[name].append(cpu)
        for name in names:
            walls[name].append(statistics.median(wall_round[name]))
            cpus[name].append(statistics.median(cpu_round[name]))
    reference = names[0]
    print(f"\n{title} (median of {rounds} rounds of {calls} interleaved calls):")
    width = max(map(len, names))
    result = {}
    for name in names:
        wall = statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        ratios = [w / r for w, r in zip(walls[name], walls[reference], strict=True)]
        ratio = statistics.median(ratios)
        result[name] = wall
        print(f"  {name:<{width}}  {wall * 1000:8.1f} ms  cpu {cpu * 1000:7.1f} ms  {ratio:5.2f}x  "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x)")
        if target is not None and name == names[1]:
            result["ratio"] = ratio
    if target is not None:
        print(f"  -> {names[1]} vs {reference}: {result['ratio']:.2f}x (target <= {target:g}x) "
              f"{'met' if result['ratio'] <= target else 'NOT met'}")
    return result


def in_process(env: dict[str, str], calls: int) -> float:
    """Median of ``main()`` for a kept call inside this process: the client's own work and the socket
    round trip (the call itself, and its audit records, in the background process), no interpreter start."""
    from remote_bash.cli import main as cli_main

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            if cli_main(["exec", "--keep", "h000", "--", "true"]) != 0:
                raise SystemExit("exec --keep failed in-process")
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=30, help="hosts of the fleet comparison")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="calls of each method per round (x4 for kept calls)")
    parser.add_argument("--skip", default="", help="comma-separated: exec,keep,fleet")
    parser.add_argument("--shared-proc", action="store_true",
                        help="start every sshd on this machine's own /proc (default: each in a PID namespace "
                             "with its own, as each host of a real fleet has)")
    args = parser.parse_args()
    with open(PYTHON, "rb") as binary:
        if binary.read(4) != b"\x7fELF":
            raise SystemExit(f"{PYTHON} is not an interpreter binary (a shim?): run this with the real one")
    skip = set(filter(None, args.skip.split(",")))
    # An install compiles the package's bytecode; a tree run with PYTHONDONTWRITEBYTECODE has none.
    compileall.compile_dir(str(ROOT / "remote_bash"), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-cli-"))
    work.chmod(0o755)  # sshd reads authorized_keys below it as the test user
    own_proc = not args.shared_proc and own_proc_wrapper() is not None
    th = make_test_hosts(work / "hosts", own_proc=own_proc)
    print("hosts: each sshd in a PID namespace with its own /proc (a host's processes only, as on a real fleet)"
          if own_proc else "hosts: every sshd shares this machine's /proc (each host's close-time check also "
          "reads every other host's processes)")
    try:
        hosts = start_hosts(th, args.hosts)
        (work / "hosts.json").write_text(json.dumps(hosts))
        lines = ["hosts:"]
        for h in hosts:
            lines += [f"  {h['name']}:", f"    hostname: {h['hostname']}", f"    port: {h['port']}",
                      f"    user: {h['user']}", f"    identity_file: {h['key']}",
                      f"    known_hosts: {h['known_hosts']}", "    credential: key"]
        (work / "hosts.yaml").write_text("\n".join(lines) + "\n")
        home = work / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_BASH_", "XDG_", "PYTHON"))}
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"),
                   REMOTE_BASH_INVENTORY=str(work / "hosts.yaml"), PYTHONPATH=str(ROOT))
        script = work / "remote-bash"
        script.write_text(CONSOLE_SCRIPT.format(python=PYTHON))
        (work / "one.py").write_text(ONE)
        (work / "gather.py").write_text(GATHER)
        cli = [PYTHON, str(script)]
        first = hosts[0]
        print(f"{args.hosts} sshd on loopback; {PYTHON} {sys.version.split()[0]}; "
              f"load average {os.getloadavg()[0]:.1f} at start")
        print(f"site hooks run by every process of this installation: {', '.join(site_hooks()) or 'none'}")
        venv_cli = bare_venv(work)
        venv_python = venv_cli.parent / "python"
        compare("interpreter start, for scale", {
            "python -c pass (this installation's site hooks)": [PYTHON, "-c", "pass"],
            "python -I -c pass (isolated: no user site, env)": [PYTHON, "-I", "-c", "pass"],
            "python -S -c pass (no site at all)": [PYTHON, "-S", "-c", "pass"],
            "bare virtualenv: python -c pass": [str(venv_python), "-c", "pass"],
            "bare virtualenv: python -c 'import re' (pip's wrapper)": [str(venv_python), "-c", "import re"],
        }, env, args.rounds, args.calls * 4, None)
        if "exec" not in skip:
            compare("exec HOST -- true, whole process", {
                "asyncssh connect + run script (reference)": [PYTHON, str(work / "one.py"),
                                                              str(work / "hosts.json")],
                "remote-bash exec h000 -- true": [*cli, "exec", "h000", "--", "true"],
            }, env, args.rounds, args.calls, 1.15)
            (work / "inside.py").write_text(INSIDE)
            got = subprocess.run([PYTHON, str(work / "inside.py"), str(work / "hosts.json"), str(work / "hosts.yaml"),
                                  str(args.calls * 4)], env=env, check=True, capture_output=True, text=True,
                                 timeout=TIMEOUT).stdout.split()
            print(f"  after the imports, in one process (median of {args.calls * 4} interleaved pairs): asyncssh "
                  f"connect + run {float(got[0]):.1f} ms, a session's start + run + close {float(got[1]):.1f} ms")
        if "keep" not in skip:
            control = work / "cm"
            ssh = ["ssh", "-p", str(first["port"]), "-i", str(first["key"]), "-o",
                   f"UserKnownHostsFile={first['known_hosts']}", "-o", "StrictHostKeyChecking=yes", "-o",
                   f"ControlPath={control}", "-o", "BatchMode=yes", f"{first['user']}@{first['hostname']}"]
            master = subprocess.Popen([*ssh[:-1], "-o", "ControlMaster=yes", "-N", ssh[-1]])
            try:
                deadline = time.monotonic() + 30
                while not control.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not control.exists():
                    raise SystemExit("the ControlMaster socket did not appear within 30 s")
                subprocess.run([*cli, "exec", "--keep", "h000", "--", "cd /tmp && KEPT=kept"], env=env,
                               check=True, timeout=TIMEOUT)
                state = subprocess.run([*cli, "exec", "--keep", "h000", "--", "echo $PWD $KEPT"], env=env,
                                       check=True, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
                print(f"\nthe kept session answers {state!r}: cwd and variable from the previous process")
                venv_name = "remote-bash exec --keep h000 -- true, from a bare virtualenv (as pipx or a venv runs it)"
                global_name = "the same with this installation's interpreter (its site hooks)"
                keep = compare("exec --keep HOST -- true, kept session warm, whole process", {
                    "ssh, warm ControlMaster (reference)": [*ssh[:-1], "-o", "ControlMaster=no", ssh[-1], "true"],
                    venv_name: [str(venv_python), str(venv_cli), "exec", "--keep", "h000", "--", "true"],
                    global_name: [*cli, "exec", "--keep", "h000", "--", "true"],
                    "python -c pass (this installation's site hooks)": [PYTHON, "-c", "pass"],
                    "bare virtualenv: python -c pass": [str(venv_python), "-c", "pass"],
                    "bare virtualenv: python -c 'import re' (pip's wrapper)": [str(venv_python), "-c", "import re"],
                    "bare virtualenv: the client's standard library alone": [str(venv_python), "-c",
                                                                             CLIENT_STDLIB],
                }, env, args.rounds, args.calls * 4, 3.0)
                reference = keep["ssh, warm ControlMaster (reference)"]
                floor = keep["python -c pass (this installation's site hooks)"]
                print(f"  with this installation's interpreter: {keep[global_name] * 1000:.1f} ms = "
                      f"{keep[global_name] / reference:.2f}x ssh, where its start alone (python -c pass, with the "
                      f"site hooks above) is {floor * 1000:.1f} ms = {floor / reference:.2f}x")
                bare = keep[venv_name] - keep["bare virtualenv: python -c 'import re' (pip's wrapper)"]
                print(f"  exec --keep beyond python -c 'import re' in the bare virtualenv: {bare * 1000:.1f} ms "
                      f"(the client ends its process without the interpreter's teardown, which every floor here pays)")
                inside = in_process(env, args.calls * 20)
                print(f"  of which main() in-process (client work + one socket round trip + the call): "
                      f"{inside * 1000:.1f} ms")
            finally:
                subprocess.run([*cli, "sessions", "stop", "--all"], env=env, timeout=TIMEOUT,
                               stdout=subprocess.DEVNULL, check=False)
                master.terminate()
                master.wait(10)
        if "fleet" not in skip:
            n = args.hosts
            compare(f"fleet exec on {n} hosts, whole process", {
                f"asyncssh gather script, {n} hosts (reference)": [PYTHON, str(work / "gather.py"),
                                                                   str(work / "hosts.json")],
                f"remote-bash fleet exec --forks {n} all": [*cli, "fleet", "exec", "--forks", str(n), "all", "--",
                                                          "uname -a"],
            }, env, args.rounds, args.calls, 1.25)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        th.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
