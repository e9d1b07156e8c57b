"""Benchmark: ``remote-bash exec --keep HOST -- true`` (warm, whole process) against OpenSSH's ControlMaster.

In one run against one local sshd (127.0.0.2), interleaved call by call so that whatever else the
machine does weighs on every method alike, each call a whole process:
  - ``ssh`` through a warm ControlMaster socket (ControlPath in a temp dir): the reference;
  - ``remote-bash exec --keep HOST -- true`` with its kept session already running (shell state kept);
  - ``remote-bash exec HOST -- true`` (a session of its own: connect, shell, close), for reference;
  - ``python3 -c pass``: the interpreter's own start, the floor of any Python client.
Prints, per round, the median of each and the ratios to ControlMaster, then the median over rounds.

Run: python bench/bench_keep.py [--rounds 5] [--calls 10]
All traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sshd import make_test_hosts  # noqa: E402 -- after the path to the tree under test


def _timed(command: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   timeout=120)
    return time.perf_counter() - t


def _in_process(env: dict[str, str], calls: int) -> float:
    """Median of the command line's ``main()`` for a kept call, in this process: parsing, the socket
    round trip, the call (and its audit records) in the background process."""
    from remote_bash.cli import main as cli_main

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            assert cli_main(["exec", "--keep", "bench", "--", "true"]) == 0
            times.append(time.perf_counter() - t)
        return statistics.median(times)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="calls of each method per round")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rb-bench-keep-"))
    work.chmod(0o755)  # sshd reads authorized_keys below it as the test user
    hosts = make_test_hosts(work / "hosts")
    host = hosts.start("bench")
    home = work / "home"
    home.mkdir()
    inventory = work / "hosts.yaml"
    # JSON is YAML: no YAML writer needed here.
    inventory.write_text(json.dumps({"hosts": {"bench": {
        "hostname": host.hostname, "port": host.port, "user": host.user,
        "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts)}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"),
               REMOTE_BASH_INVENTORY=str(inventory))
    cli = [sys.executable, "-m", "remote_bash.cli"]
    control = work / "cm"
    ssh = ["ssh", "-p", str(host.port), "-i", str(host.identity_file), "-o", f"UserKnownHostsFile={host.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", f"ControlPath={control}", "-o", "BatchMode=yes"]
    master = subprocess.Popen([*ssh, "-o", "ControlMaster=yes", "-N", f"{host.user}@{host.hostname}"])
    try:
        for _ in range(200):
            if control.exists():
                break
            time.sleep(0.05)
        else:
            raise SystemExit("the ControlMaster socket did not appear within 10 s")
        methods = {
            "ssh, warm ControlMaster (reference)": [*ssh, "-o", "ControlMaster=no", f"{host.user}@{host.hostname}",
                                                    "true"],
            "remote-bash exec --keep, warm": [*cli, "exec", "--keep", "bench", "--", "true"],
            "remote-bash exec (no keep)": [*cli, "exec", "bench", "--", "true"],
            "python3 -c pass (interpreter start)": [sys.executable, "-c", "pass"],
        }
        # Warm the kept session, and show that it keeps the shell's state.
        subprocess.run([*cli, "exec", "--keep", "bench", "--", "cd /tmp && KEPT=state-kept"], env=env, cwd=ROOT,
                       check=True, timeout=120)
        kept = subprocess.run([*cli, "exec", "--keep", "bench", "--", "echo $PWD $KEPT"], env=env, cwd=ROOT,
                              check=True, capture_output=True, text=True, timeout=120).stdout.strip()
        print(f"kept session answers: {kept!r} (cwd and variable from the previous invocation)")
        for command in methods.values():
            _timed(command, env)
        names = list(methods)
        reference = names[0]
        medians: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            times: dict[str, list[float]] = {name: [] for name in names}
            for _ in range(args.calls):
                for name in names:
                    times[name].append(_timed(methods[name], env))
            for name in names:
                medians[name].append(statistics.median(times[name]))
            ref = medians[reference][-1]
            print(f"round {r + 1}: " + ", ".join(
                f"{name.split(' (')[0]} {medians[name][-1] * 1000:.1f} ms ({medians[name][-1] / ref:.2f}x)"
                for name in names))
        print(f"\nmedian over {args.rounds} rounds of {args.calls} interleaved calls each (whole processes):")
        ref = statistics.median(medians[reference])
        width = max(map(len, names))
        for name in names:
            value = statistics.median(medians[name])
            ratios = [m / rm for m, rm in zip(medians[name], medians[reference], strict=True)]
            print(f"  {name:<{width}}  {value * 1000:7.1f} ms  {value / ref:5.2f}x  "
                  f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x)")
        inside = _in_process(env, args.calls * 5)
        print(f"exec --keep's main() in-process (no interpreter start): {inside * 1000:.1f} ms")
        own = statistics.median(k - p for k, p in zip(medians[names[1]], medians[names[3]], strict=True))
        print(f"\nexec --keep beyond the interpreter's start (client, socket round trip, the call itself): "
              f"{own * 1000:.1f} ms")
        keep = statistics.median(medians[names[1]]) / ref
        print(f"exec --keep vs ControlMaster: {keep:.2f}x (target <= 3x) "
              f"{'met' if keep <= 3 else 'NOT met'}")
    finally:
        subprocess.run([*cli, "sessions", "stop", "--all"], env=env, cwd=ROOT, timeout=120,
                       stdout=subprocess.DEVNULL, check=False)
        master.terminate()
        master.wait(5)
        hosts.stop_all()


if __name__ == "__main__":
    main()
