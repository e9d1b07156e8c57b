"""Approval of risky commands: the pure rules, and the terminal question of ``run`` through a real
pseudo-terminal against real sshd and the scripted Messages endpoint."""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote_bash.approval import Grants, approval_needed, effective_rules
from remote_bash.errors import InventoryError
from remote_bash.inventory import load_inventory
from remote_bash.models import Host, RegexApproveRule, WritesOutsideRule

from .messages_server import MessagesServer, Reply, text, tool_use
from .sshd import TestHosts

ROOT = Path(__file__).resolve().parents[1]
PROD = Host(name="p", hostname="127.0.0.1", labels={"env": "production"})
STAGING = Host(name="s", hostname="127.0.0.1", labels={"env": "staging"})


@pytest.mark.parametrize("command", [
    "sudo id", "env A=1 sudo -u root id", "bash -c 'su - root'", "nohup timeout 5 doas ls", "chmod u+s /bin/x",
    "chmod 4755 /bin/x", "useradd bob", "apt-get install -y nginx", "dnf upgrade", "pip install requests",
    "dpkg -i x.deb", "rpm -Uvh x.rpm", "systemctl restart nginx", "service nginx stop", "reboot", "pkill -f app",
    "rm -f /tmp/x", "find /var -name '*.log' -delete", "dd if=/dev/zero of=/dev/sda", "mkfs.ext4 /dev/sdb1",
    "git clean -fdx", "ls; rm x", "echo $(rm x)", "$CMD --now", "echo 'unclosed",
    # forms an outside attack ran without a question: other wrappers, text fed to a shell, inline programs
    "busybox rm -f F", "flock /tmp/l rm -f F", "coproc rm -f F", "env -S 'rm -f F'", "bash <<<'rm -f F'",
    "sh -s <<<'rm -f F'", "echo 'rm x' | bash", "script -qc 'rm -f F' /dev/null", "mv F /dev/null",
    "install -m 4755 /bin/true /tmp/x", "perl -e 'unlink 1'", "python3 -c 'import os'",
    "awk 'BEGIN{system(\"reboot\")}'", "bash deploy.sh",
])
def test_production_default_asks_for_risky_commands(command: str) -> None:
    assert approval_needed(command, PROD) is not None
    assert approval_needed(command, STAGING) is None  # the default elsewhere: never


@pytest.mark.parametrize("approve", [
    [{"regex": "touch"}], [{"regex": r"(t)\1"}], [{"writes_outside": ["/srv"]}], [{"regex": "x", "other": 1}],
    [["touch"]], "ALL", ("deletions", 3), [{"writes_outside": "/srv"}],
    # rule objects whose fields model_copy changed
    [WritesOutsideRule(writes_outside=["/srv"]).model_copy(update={"writes_outside": "/srv"})],
    [WritesOutsideRule(writes_outside=["/srv"]).model_copy(update={"writes_outside": [""]})],
    [WritesOutsideRule(writes_outside=["/srv"]).model_copy(update={"writes_outside": None})],
    [WritesOutsideRule(writes_outside=["/srv"]).model_copy(update={"writes_outside": [b"/srv"]})],
    [RegexApproveRule(regex="x").model_copy(update={"regex": 5})],
])
def test_a_rule_set_without_validation_is_never_skipped(approve: object) -> None:
    # model_copy does not validate (as pydantic's): the file's form, or any other, must still ask.
    host = STAGING.model_copy(update={"approve": approve})
    need = approval_needed("touch /tmp/x", host)
    assert need is not None, approve


def test_an_approve_regex_runs_on_the_linear_time_engine() -> None:
    # A pattern that backtracks for minutes on Python's engine answers at once.
    host = Host(name="r", hostname="127.0.0.1", approve=[{"regex": "(x+x+)+y"}])
    assert approval_needed("x" * 5000, host) is None
    assert approval_needed("xxy", host) is not None


ATTACKED = Host(name="a", hostname="127.0.0.1",
                approve=["privilege", "packages", "services", "deletions", {"writes_outside": ["/tmp"]}])


@pytest.mark.parametrize("command", [
    # eval runs its arguments as shell text: read when they are plain literals, asked about otherwise
    'eval "rm -f F"', "builtin eval 'rm -f F'", "command eval rm -f F", "time eval 'rm -f F'",
    "time -p eval rm F", "eval \"$X\"", "eval $(cat /tmp/x)", "X=1 eval 'sudo id'",
    # source reads a script the text does not show (here its own input)
    "source /dev/stdin <<< 'rm -f F'", ". /dev/stdin <<< 'rm -f F'", "source <(echo rm F)", ". ./env.sh",
    # git aliases and config keys can run shell commands
    "git -c alias.z='!rm -f F' z", "git -c core.pager='rm -f F' log", "git --config-env=core.pager=X log",
    "git --exec-path=/tmp/x status",
    # packages through an interpreter's module runner and other managers
    "python3 -m pip install X", "python3 -mpip install X", "python -m pip uninstall -y X", "pip3.11 install X",
    "uv pip install X", "conda install -y X", "brew install X", "cargo install X",
    # setuid/setgid bits however the mode is spelled
    "chmod =4755 F", "chmod u+s F", "chmod g+s F", "chmod 2755 F", "chmod 02755 F", "chmod 6755 F",
    "chmod u+x,g+s F", "chmod +4000 F", "chmod a=rwxs F", "chmod -R u=rwxs F", "chmod --reference=/usr/bin/sudo F",
    # inline programs that run commands
    "sed 's/x/rm -f F/e' G", "sed -n 'e rm -f F' G", "sed -e '1e rm -f F' G", "sed -f prog.sed G",
    "perl -ne 'unlink 1' F", "python3 -uc 'import os'", "python3 <<< 'import os'", "perl - <<< 'unlink 1'",
    "awk -v x=1 'BEGIN{system(\"rm F\")}'", "find . -exec sudo id \\;",
    # variables that load code or change what runs, as prefixes, bare, exported or through env
    "LD_PRELOAD=/tmp/x.so true", "LD_LIBRARY_PATH=/tmp cat F", "BASH_ENV=/tmp/x bash -c true", "ENV=/tmp/x sh -c :",
    "PATH=/tmp:$PATH ls", "PATH=/tmp", "export LD_PRELOAD=/tmp/x.so", "export PROMPT_COMMAND='rm F'",
    "declare -x LD_AUDIT=/tmp/x.so", "env LD_PRELOAD=/tmp/x.so cat F", "sudo LD_PRELOAD=/tmp/x.so id",
    "PS4='$(rm F)' bash -xc true", "IFS=/ cat F", "GIT_SSH_COMMAND='rm F' git fetch", "PYTHONPATH=/tmp python3 a.py",
    "X+=1 rm -f F", "A[1]=x rm -f F", "PAGER='rm -f F' git log", "GIT_PAGER=less git log", "PATH+=:/tmp ls",
    # text the shell keeps and runs later
    "trap 'rm -f F' EXIT", "trap -- 'rm -f F' DEBUG", "echo 'rm F' | at now", "batch < jobs", "crontab -",
    "crontab /tmp/cron", "alias ls='rm -f F'", "enable -f /tmp/x.so x",
    # writes: through a link made to outside the allowed paths, or to a target named by an option
    "ln -s ~ /tmp/link", "ln -sfn /etc /tmp/link; echo x > /tmp/link/f", "ln /etc/passwd /tmp/hard",
    "cp -s /etc/passwd /tmp/x", "cp -al /etc /tmp/x", "cp --symbolic-link -t /tmp /etc/shadow",
    "cp -t ~ /tmp/x", "mv --target-directory=/etc /tmp/x", "echo x >& /etc/f", "sed 'w /etc/x' /tmp/f",
    "sed 's/a/b/w /etc/x' /tmp/f",
    # more of the same families, as the README names them
    "git rebase -x 'rm F' main", "git submodule foreach 'rm F'", "git bisect run ./t.sh", "read PATH <<< /tmp",
    "printf -v PATH /tmp", "HOME=/tmp/x git status", "NODE_OPTIONS='--require /tmp/x.js' node a.js",
    "RUBYOPT=-r/tmp/x ruby a.rb", "gem install x", "declare -n r=LD_PRELOAD", "node -e 'x'",
    "bash -c 'echo x > /etc/f'",
])
def test_attacked_forms_ask(command: str) -> None:
    assert approval_needed(command, ATTACKED) is not None, command


def test_a_risky_command_after_many_others_still_asks() -> None:
    assert approval_needed("true; " * 300 + "rm -f F", ATTACKED) is not None
    assert approval_needed("true; " * 300 + "ls", ATTACKED) is None
    nested = "rm -f F"
    for _ in range(8):
        nested = f"eval {shlex.quote(nested)}"  # eval of eval of ... rm, each level quoted again
    need = approval_needed(nested, ATTACKED)
    assert need is not None and need.rule == "deletions", need
    # Text built to be read many ways (options that may take values, eval of eval) asks once the
    # reading's bound is reached, instead of reading on.
    for built in ("sudo -x " * 300 + "ls", "eval " * 5000 + "ls", "watch -x 'a b' " * 3000 + "ls"):
        need = approval_needed(built, DELETIONS)
        assert need is not None and need.rule == "unreadable", need


@pytest.mark.parametrize("command", [
    "eval 'echo hi'", "eval ls -l", "sed -n '/error/p' /var/log/x", "sed 's/e/E/g' F", "sed -e 's/a/b/;p' F",
    "chmod 755 /tmp/F", "chmod u+x /tmp/F", "chmod -s /tmp/F", "chmod g-s /tmp/F", "chmod 1777 /tmp/d",
    "python3 -m http.server 8000",
    "LC_ALL=C sort F", "export FOO=bar", "FOO=1 ls", "git -C /tmp/repo status", "git log -1", "trap - EXIT",
    "ln -s /tmp/a /tmp/b", "cp -t /tmp/d /etc/hosts", "cp -r /etc/skel /tmp/x",
    "cp -s /tmp/a /tmp/b", "awk -F'|' '{print $1}' F", "echo x >&2",
    "find . -name '*.py' -exec grep -l x {} +", "PAGER=cat git log", "SYSTEMD_PAGER= systemctl status x",
    ". /etc/os-release && echo $ID", "nice -n 5 ls", "timeout 5 ls", "crontab -l", "watch -n 1 df -h",
])
def test_attacked_forms_that_read_do_not_ask(command: str) -> None:
    assert approval_needed(command, ATTACKED) is None, command


WRAPPERS = ["builtin", "command", "time", "time -p", "nohup", "sudo", "env", "exec", "nice -n 5", "timeout 5",
            "X=1", "command -p"]


@given(st.lists(st.sampled_from(WRAPPERS), max_size=5),
       st.sampled_from(["rm -f F", "sudo id", "apt-get install x", "systemctl stop x", "echo x > /etc/f"]),
       st.sampled_from(["'{}'", '"{}"', "{}"]))
def test_any_wrapper_chain_ending_in_eval_asks(wrappers: list[str], inner: str, quoting: str) -> None:
    command = " ".join([*wrappers, "eval", quoting.format(inner)])
    assert approval_needed(command, ATTACKED) is not None, command


@given(st.lists(st.sampled_from(WRAPPERS), max_size=4),
       st.text(alphabet="abcx$(){}`'\"; ", min_size=1, max_size=12))
def test_eval_of_anything_but_plain_literals_asks(wrappers: list[str], word: str) -> None:
    quoted = shlex.quote(word)
    command = " ".join([*wrappers, "eval", "$X" + quoted])  # an expansion: known only when it runs
    assert approval_needed(command, ATTACKED) is not None, command


DELETIONS = Host(name="d", hostname="x", approve=["deletions"])


@pytest.mark.parametrize("command", [
    "sudo -u root rm -f F", "exec -a x rm F", "timeout -s KILL 5 rm F", "env -u X rm F", "env -C /tmp rm F",
    "xargs -n 1 rm", "ionice -c 3 rm F", "stdbuf -o L rm F", "watch -n 1 rm F", "su -c 'rm F'",
    "su - root -c 'rm F'", "doas -u root rm F", "runuser -u bob -- rm F", "time -f %e rm F",
    "setpriv --reuid 0 rm F", "nsenter -t 1 -m rm F", "flock /tmp/l -c 'rm F'", "faketime 2020-01-01 rm F",
    "systemd-run -u x rm F", "sudo --some-new-option value rm F", "watch 'rm -f F'", "watch -n 5 'ls; rm F'",
    "sudo -s 'rm -f F'", "sudo -i 'cd /; rm -f F'",
])
def test_wrapper_options_with_values_do_not_hide_the_command(command: str) -> None:
    need = approval_needed(command, DELETIONS)
    assert need is not None and need.rule == "deletions", (command, need)


@given(st.data())
def test_any_option_of_a_wrapper_before_a_deletion_asks(data: st.DataObject) -> None:
    from remote_bash._programs import _VALUE_OPTIONS

    wrapper = data.draw(st.sampled_from(sorted(_VALUE_OPTIONS)))
    options = data.draw(st.lists(st.one_of(st.sampled_from(sorted(_VALUE_OPTIONS[wrapper])),
                                           st.from_regex(r"-[a-zA-Z]|--[a-z]{2,8}", fullmatch=True)), max_size=3))
    parts = [wrapper]
    if wrapper in ("flock", "chroot", "faketime", "ssh"):
        parts.append("/tmp/own")
    for option in options:
        parts += [option, data.draw(st.sampled_from(["x", "root", "5", "L"]))]
    command = " ".join([*parts, "rm", "-f", "F"])
    need = approval_needed(command, DELETIONS)
    assert need is not None, command


@given(st.sampled_from(["4", "2", "6"]), st.text(alphabet="01234567", min_size=3, max_size=3),
       st.sampled_from(["", "0", "=", "+", "a=", "u+"]))
def test_every_spelling_of_a_setuid_mode_asks(special: str, rest: str, prefix: str) -> None:
    assert approval_needed(f"chmod {prefix}{special}{rest} F", ATTACKED) is not None


@pytest.mark.parametrize("command", [
    "ls -la /etc", "cat /var/log/syslog | tail", "systemctl status nginx", "apt list --installed", "dpkg -l",
    "rpm -qa", "pip list", "df -h", "journalctl -u nginx -n 50", "echo rm", "grep sudo /etc/group",
    "ps aux | awk '{print $2}'", "python3 app.py --check", "curl -s http://127.0.0.1/health",
])
def test_production_default_leaves_reading_alone(command: str) -> None:
    assert approval_needed(command, PROD) is None


def test_explicit_rules_regex_and_writes_outside() -> None:
    host = Host(name="h", hostname="x", approve=[{"regex": r"\bprod-db\b"}, {"writes_outside": ["/tmp", "/srv/app"]}])
    assert approval_needed("psql -h prod-db", host) is not None
    assert approval_needed("echo hi > /tmp/a; cp x /srv/app/y", host) is None
    need = approval_needed("echo hi > /etc/motd", host)
    assert need is not None and "/etc/motd" in need.reason
    assert approval_needed("tee -a /var/log/x < y", host) is not None
    assert approval_needed("sed -i s/a/b/ /etc/hosts", host) is not None
    assert approval_needed("echo x > relative.txt", host) is not None  # where it lands depends on cwd
    assert approval_needed("echo x > /tmp/../etc/passwd", host) is not None
    assert approval_needed("sudo id", host) is None  # not a named class of this host
    for writes in ("curl -so ~/x http://h/", "curl -sSLo /etc/x u", "wget http://h/x", "sort -o ~/x y",
                   "git init ~/x", "git clone http://h/r"):
        assert approval_needed(writes, host) is not None, writes
    assert approval_needed("curl -so /tmp/x http://h/", host) is None
    assert approval_needed("ls", Host(name="h", hostname="x", approve="all")) is not None
    assert approval_needed("reboot", Host(name="h", hostname="x", labels={"env": "prod"}, approve="never")) is None
    assert effective_rules(PROD) == ("privilege", "packages", "services", "deletions")


def test_inventory_approve_errors_name_the_field(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  a: {hostname: x, approve: [writes_outside]}\n")
    with pytest.raises(InventoryError, match=r"hosts\.a\.approve"):
        load_inventory(inv)
    inv.write_text("hosts:\n  a: {hostname: x, approve: [{writes_outside: [tmp]}]}\n")
    with pytest.raises(InventoryError, match="absolute"):
        load_inventory(inv)


@given(st.one_of(st.text(max_size=200), st.lists(st.sampled_from(
    ["eval", "sudo", "-u", "-x", "--", "x", "rm", "F", "'", '"', ";", "|", "$(", ")", "=", "A=1", "LD_PRELOAD=x",
     "sed", "s/a/b/e", "chmod", "+s", "ln", "-s", "~", "/tmp/l", ">", "/etc/f", "watch", "bash", "-c", "source",
     "find", "-exec", "\\;", "git", "-c", "python3", "-m", "pip", "install"]), max_size=14).map(" ".join)))
def test_never_raises_and_unreadable_text_asks(command: str) -> None:
    need = approval_needed(command, PROD)
    assert need is None or need.reason
    need = approval_needed(command, ATTACKED)
    assert need is None or need.reason


def test_grants_expire() -> None:
    now = [0.0]
    grants = Grants(clock=lambda: now[0])
    grants.add("h", "sudo id", 1)
    assert grants.covers("h", "sudo id") and not grants.covers("h", "sudo id ") and not grants.covers("g", "sudo id")
    now[0] = 61.0
    assert not grants.covers("h", "sudo id")


def _read_until(fd: int, needle: bytes, seconds: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never saw {needle!r} on the terminal; saw {seen[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


@pytest.fixture
def prod_env(hosts: TestHosts, server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    host = hosts.start(f"ap-{tmp_path.name[-6:]}")
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "hosts.yaml").write_text(json.dumps({"hosts": {"prod-1": {
        "hostname": host.hostname, "port": host.port, "user": host.user, "credential": "key",
        "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts),
        "labels": {"env": "production"}}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "REMOTE_BASH_", "XDG_"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), ANTHROPIC_API_KEY="test",
               ANTHROPIC_BASE_URL=server.url, REMOTE_BASH_INVENTORY=str(tmp_path / "hosts.yaml"),
               REMOTE_BASH_AUDIT_DIR=str(tmp_path / "audit"), PYTHONPATH=str(ROOT))
    return env


def test_run_asks_at_the_terminal(prod_env: dict[str, str], server: MessagesServer, tmp_path: Path) -> None:
    server.add(
        Reply([tool_use({"command": "sudo id"}, id="toolu_refused")]),
        Reply([tool_use({"command": "rm -f /tmp/rb-approve-\x1b[31mx; echo removed"}, id="toolu_once")]),
        Reply([text("Done.")]),
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, with the pseudo-terminal as its controlling terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "remote_bash.cli", "run", "--host", "prod-1", "tidy up"],  # noqa: S606
                  prod_env)
    try:
        screen = _read_until(fd, b"[n] refuse")
        assert b"prod-1" in screen and b"sudo id" in screen
        os.write(fd, b"n not on production\n")
        screen = _read_until(fd, b"[n] refuse")
        assert b"\\x1b[31m" in screen and b"\x1b[31m" not in screen.split(b"[approval]")[-1]
        os.write(fd, b"y\n")
        _read_until(fd, b"Done.")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    results = {r["tool_use_id"]: r for r in server.tool_results(1)} | {r["tool_use_id"]: r
                                                                        for r in server.tool_results(2)}
    assert results["toolu_refused"]["is_error"] and "not on production" in str(results["toolu_refused"]["content"])
    assert "removed" in str(results["toolu_once"]["content"])
    records = [json.loads(line) for line in (tmp_path / "audit" / "prod-1.jsonl").read_text().splitlines()]
    answered = [(r["tool_use_id"], r["how"], r["approved"]) for r in records if r["event"] == "approval.answered"]
    assert answered == [("toolu_refused", "refused", False), ("toolu_once", "once", True)]
    assert not [r for r in records if r["event"] == "exec.start" and r["command"] == "sudo id"]


def test_run_without_a_terminal_refuses_and_no_approve_runs(prod_env: dict[str, str],
                                                           server: MessagesServer, tmp_path: Path) -> None:
    server.add(Reply([tool_use({"command": "rm -f /tmp/rb-none"}, id="toolu_a")]), Reply([text("ok")]))
    cmd = [sys.executable, "-m", "remote_bash.cli", "run", "--host", "prod-1", "x"]
    out = subprocess.run(cmd, env=prod_env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL, start_new_session=True, check=False)
    assert out.returncode == 0, out.stderr
    result = server.tool_results(1)[0]
    assert result["is_error"] and "no terminal" in str(result["content"])
    server.add(Reply([tool_use({"command": "rm -f /tmp/rb-none; echo ran"}, id="toolu_b")]), Reply([text("ok")]))
    out = subprocess.run([*cmd[:4], "--no-approve", *cmd[4:]], env=prod_env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL, start_new_session=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "ran" in str(server.tool_results(-1)[0]["content"])
    records = [json.loads(line) for line in (tmp_path / "audit" / "prod-1.jsonl").read_text().splitlines()]
    assert [r["how"] for r in records if r["event"] == "approval.answered"] == ["unavailable", "all"]


@pytest.mark.parametrize("coordinator", [False, True])
def test_fleet_run_without_a_terminal_refuses_and_no_approve_runs(prod_env: dict[str, str], server: MessagesServer,
                                                                  tmp_path: Path, coordinator: bool) -> None:
    def step(command: str, tool_id: str) -> Reply:
        if coordinator:
            return Reply([tool_use({"host": "prod-1", "command": command}, id=tool_id, name="remote_bash")])
        return Reply([tool_use({"command": command}, id=tool_id)])

    mode = ["--coordinator"] if coordinator else []
    base = [sys.executable, "-m", "remote_bash.cli", "fleet", "run", *mode]
    server.add(step("rm -f /tmp/rb-fleet-none", "toolu_f1"), Reply([text("ok")]))
    out = subprocess.run([*base, "prod-1", "x"], env=prod_env, cwd=ROOT, capture_output=True, text=True,
                         timeout=90, stdin=subprocess.DEVNULL, start_new_session=True, check=False)
    result = server.tool_results(1)[0]
    assert result["is_error"] and "no terminal" in str(result["content"]), out.stderr
    server.add(step("rm -f /tmp/rb-fleet-none; echo ran", "toolu_f2"), Reply([text("ok")]))
    out = subprocess.run([*base, "--no-approve", "prod-1", "x"], env=prod_env, cwd=ROOT, capture_output=True,
                         text=True, timeout=90, stdin=subprocess.DEVNULL, start_new_session=True, check=False)
    assert "ran" in str(server.tool_results(-1)[0]["content"]), out.stderr
    records = [json.loads(line) for line in (tmp_path / "audit" / "prod-1.jsonl").read_text().splitlines()]
    assert [r["how"] for r in records if r["event"] == "approval.answered"] == ["unavailable", "all"]


@pytest.mark.parametrize("command", [
    # shell state that persists between calls and changes what a later command runs
    "hash -p /bin/rm ls", "hash -lp /bin/rm ls", "BASH_CMDS[ls]=/bin/rm", "BASH_ALIASES[ls]='rm -f'",
    "declare BASH_CMDS[ls]=/bin/rm", "read 'BASH_CMDS[ls]' <<< /bin/rm", "shopt -s expand_aliases",
    "shopt -qs extglob expand_aliases", "enable -n echo", "enable -nf x.so y", "alias ll='ls -l'",
    "ls() { echo hi; }", "function ls { echo hi; }", "function ls() { echo hi; }", "f () { :; }; f",
    "EXECIGNORE=/usr/bin/ls", "set -k", "set -o keyword", "eval 'ls() { :; }'", "command hash -p /bin/rm ls",
    "declare -n r=BASH_CMDS",
])
def test_changes_to_command_lookup_ask(command: str) -> None:
    for host in (ATTACKED, DELETIONS):
        need = approval_needed(command, host)
        assert need is not None, command
    need = approval_needed(command, DELETIONS)
    assert need is not None and ("later commands" in need.reason or "changes what" in need.reason), need


@pytest.mark.parametrize("command", [
    # builtins that run a text they are given
    "mapfile -C 'rm -f F #' -c 1 < /etc/hostname", "readarray -tC 'rm -f F #' < x", "mapfile -c1 -C'rm F' < x",
    "compgen -C 'rm -f F' x", "compgen -F f x", "complete -C 'rm -f F' x", "complete -F f x", "bind -x '\"a\":rm F'",
    "fc -e rm", "fc -s", "mapfile -C \"$X\" < x",
])
def test_builtins_that_run_text_ask(command: str) -> None:
    assert approval_needed(command, DELETIONS) is not None, command


@pytest.mark.parametrize("command", [
    # a literal holding a command substitution is data bash may later evaluate in arithmetic
    "x='a[$(rm -f F)]'; echo $((x))", "let 'a[$(rm -f F)]=1'", "[[ -v 'a[$(rm -f F)]' ]]",
    "read -r y <<< 'a[$(rm -f F)]'; echo $((y))", "printf -v z %s 'a[$(rm -f F)]'; : $((z))",
    "x='a[`rm -f F`]'", "x=\"a[\\$(rm -f F)]\"", "awk 1 'a[$(rm F)]'", "z='$(rm F)'; echo ${z@P}",
    "x=$'a[\\x24(rm -f F)]'", "read y <<'E'\na[$(rm F)]\nE",
])
def test_literals_carrying_a_command_substitution_ask(command: str) -> None:
    need = approval_needed(command, DELETIONS)
    assert need is not None, command


@pytest.mark.parametrize("command", [
    "sg adm -c 'rm -f F'", "sg adm 'rm -f F'", "sg adm -c x rm -f F", "flock /tmp/l -c x rm -f F",
    "chsh -s /bin/sh", "chfn -f x", "chage -M 9 u", "newgrp adm", "chown root F", "chown 0:0 F", "chgrp root F",
    "chown :root F", "ssh -p 22 h rm -f F", "ssh h 'rm -f F'",
])
def test_sg_runs_its_command_and_account_changes_ask(command: str) -> None:
    assert approval_needed(command, ATTACKED) is not None, command
    if command.startswith(("sg", "ssh")):
        need = approval_needed(command, DELETIONS)
        assert need is not None and need.rule == "deletions", need


WRITES = Host(name="w", hostname="127.0.0.1", approve=[{"writes_outside": ["/tmp", "/home/u/ok"]}])


@pytest.mark.parametrize("command", [
    "link /home/u/.bashrc /tmp/hl", "link /tmp/a /home/u/b", "ed -s /home/u/.profile <<< w", "ex -sc wq /home/u/f",
    "uniq /tmp/in /home/u/out", "xxd -r - /home/u/x", "find /tmp -fprint /home/u/fp", "find /tmp -fls /home/u/f",
    "find /tmp -fprintf /home/u/f %p", "split -b 10 /tmp/F /home/u/sp", "sqlite3 /home/u/db 'select 1'",
    "ssh-keygen -f /home/u/kk -N ''", "csplit -f /home/u/x /tmp/F 3", "tee /home/u/t", "dd if=/tmp/a of=/home/u/b",
    "cp /tmp/a /home/u/b", "install /tmp/a /home/u/b", "mv /home/u/x /tmp/",
])
def test_more_writers_are_read(command: str) -> None:
    need = approval_needed(command, WRITES)
    assert need is not None and need.rule == "writes_outside", (command, need)


@pytest.mark.parametrize("command", [
    "uniq /tmp/in /tmp/out", "xxd /etc/hosts", "find /tmp -fprint /tmp/fp", "split -b 10 /tmp/F /tmp/sp",
    "sqlite3 /tmp/db 'select 1'", "ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub", "mv /tmp/a /tmp/b",
    "link /tmp/a /tmp/b", "uniq /etc/hosts",
])
def test_writers_inside_the_allowed_paths_do_not_ask(command: str) -> None:
    assert approval_needed(command, WRITES) is None, command


@pytest.mark.parametrize("command", [
    ": > /home/u/ok/data", "> /home/u/ok/data", "true > /tmp/f", "fallocate -p -o 0 -l 9 F",
    "fallocate --punch-hole -l 9 F", "fallocate -c -l 9 F", "fallocate --collapse-range -l 9 F", "mv /tmp/a /tmp/b",
    "shred F", "unlink F", "rmdir D",
])
def test_deletions_cover_truncation_and_moves(command: str) -> None:
    need = approval_needed(command, DELETIONS)
    assert need is not None and need.rule == "deletions", (command, need)


@pytest.mark.parametrize("command", ["echo x > /tmp/f", "ls > /tmp/f", "cat a >> /tmp/f", ": > /dev/null",
                                     "fallocate -l 9 F", "echo '$HOME'", "x='a[1]'; echo $((x))",
                                     "awk '{print $(NF-1)}' F", "gawk -F: -v x=1 '{print $(NF)}' F"])
def test_deletions_leave_ordinary_writes_alone(command: str) -> None:
    assert approval_needed(command, DELETIONS) is None, command


@given(st.text(max_size=10), st.sampled_from(["$(", "`"]), st.text(max_size=10),
       st.sampled_from(["echo {}", "x={}", "let {}", "read y <<< {}", "printf -v z %s {}"]))
def test_any_quoted_command_substitution_asks(before: str, opener: str, after: str, form: str) -> None:
    command = form.format(shlex.quote(before + opener + after))
    need = approval_needed(command, DELETIONS)
    assert need is not None, command


def test_a_hash_change_is_refused_so_a_later_ls_stays_ls(prod_env: dict[str, str], server: MessagesServer,
                                                          hosts: TestHosts, tmp_path: Path) -> None:
    # The attack: call 1 ties `ls` to /bin/rm in the persistent shell, call 2 `ls -f F` deletes F.
    import shutil
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="rb-hash-"))
    victim = folder / "victim"
    try:
        victim.write_text("keep\n")
        for path in (folder, victim):
            shutil.chown(path, hosts.user)
        server.add(Reply([tool_use({"command": "hash -p /bin/rm ls"}, id="toolu_h")]),
                   Reply([tool_use({"command": f"ls -f {victim}"}, id="toolu_l")]), Reply([text("ok")]))
        out = subprocess.run([sys.executable, "-m", "remote_bash.cli", "run", "--host", "prod-1", "x"],
                             env=prod_env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, start_new_session=True, check=False)
        assert out.returncode == 0, out.stderr
        refused, listed = server.tool_results(1)[0], server.tool_results(2)[0]
        assert refused["is_error"] and "later commands" in str(refused["content"]), refused
        assert str(victim) in str(listed["content"]), listed
        assert victim.read_text() == "keep\n"
        records = [json.loads(line) for line in (tmp_path / "audit" / "prod-1.jsonl").read_text().splitlines()]
        assert [r["command"] for r in records if r["event"] == "exec.start"] == [f"ls -f {victim}"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


TRUSTED = Host(name="t", hostname="127.0.0.1", approve=["privilege", "packages", "services", "deletions",
                                                        {"writes_outside": ["/tmp/attack-trust/ok"]}])


@pytest.mark.parametrize("command", [
    # an outside attack set PATH without a NAME=value word, and a later 'ls' ran a planted ls
    "for PATH in /x/bin; do true; done", "select PATH in /x; do break; done <<< 1",
    "while true; do for IFS in x; do break; done; done", "unset PATH", "unset -v PATH",
    "unset PATH; : ${PATH:=/x/bin}", ": ${PATH=/x/bin}", 'echo "a${PATH:=/x}b"', ": ${LD_PRELOAD:=/x.so}",
    "x=PATH; : ${!x:=/x/bin}", "printf -v PATH %s /x", "printf -vPATH %s /x", "read PATH <<< /x",
    "read -r -a PATH <<< /x", "read -raPATH <<< /x", "read -- PATH <<< /x", "mapfile PATH < /dev/null",
    "readarray -t PATH < /dev/null", "declare PATH=/x", "typeset PATH=/x", "local PATH=/x", "export PATH=/x",
    "readonly PATH=/x", "exec {PATH}>/dev/null", "exec {BASH_ENV}</dev/null", "sleep 0 & wait -n -p PATH",
    "wait -pPATH", "getopts ab PATH", "command read PATH <<< /x", "((PATH=5))", ": $((PATH+=1))", "let PATH=5",
    "let PATH++", "x[PATH=5]=1", "[[ 1 -eq PATH=1 ]]",
    # a variable whose name is known only after expansion may be any of them
    'x=PATH; read "$x" <<< /x', 'printf -v "$x" %s /x', 'wait -p "$x"', "unset $x", "(( $x = 5 ))",
    "let $x=5", "export $x=/x/bin", 'declare "$x=/x/bin"', "env $x=/x ls",
])
def test_every_construct_that_assigns_a_variable_is_read_as_an_assignment(command: str) -> None:
    need = approval_needed(command, TRUSTED)
    assert need is not None and need.rule in ("environment", "lookup"), (command, need)


@pytest.mark.parametrize("command", [
    "for f in a b; do echo $f; done", "select x in a b; do break; done <<< 1", ": ${FOO:=x}", 'echo "${x:-d}"',
    "exec 3>/dev/null", "exec {fd}>/dev/null", "sleep 0 & wait $!", "wait -n -p pid", 'read -p "$prompt" x',
    "read -r line < /etc/hostname", 'getopts "$spec" opt', 'mapfile -n "$n" lines < /etc/hostname', "let i++",
    'let "i=$i+1"', "x[i++]=1; ((n+=1)); echo $((a=b+1))", "[[ $PATH == *bin* ]]", 'echo "PATH=$PATH"',
    'local a=$1 b="$2"', 'export FOO="$bar"', "unset x", "printf '%s\\n' x",
])
def test_ordinary_assignments_and_loops_do_not_ask(command: str) -> None:
    assert approval_needed(command, TRUSTED) is None, command


@pytest.mark.parametrize("command", [
    # '--' ends options: an outside attack hid the command behind it
    "eval -- 'rm -f F'", "bash -c -- 'rm -f F'", "sh -c -- 'rm -f F'", "bash -xc -- 'rm -f F'",
    "dash -e -c -- 'rm -f F'", "bash -c -e 'rm -f F'", "bash -o errexit -c 'rm -f F'", "bash -c -O extglob 'rm F'",
    "zsh -c -- 'rm -f F'", "timeout -- 5 rm -f F", "timeout -k 1 -- 5 rm -f F", "timeout .5 rm -f F",
    "timeout inf rm -f F", "sudo -- rm -f F", "sudo -u root -- bash -c -- 'rm F'", "env -- rm -f F",
    "nice -- rm -f F", "nice -n 5 -- rm F", "nohup -- rm -f F", "xargs -- rm -f F", "time -- rm -f F",
    "command -- rm -f F", "builtin -- eval -- 'rm -f F'", "exec -- rm -f F", "exec -a x -- rm F",
    "chrt -f -- 10 rm -f F", "taskset -- 1 rm -f F", "ionice -c 3 -- rm F", "stdbuf -o L -- rm F",
    "setsid -- rm F", "flock /tmp/l -- rm F", "ssh -- host rm F", "nsenter -t 1 -- rm F",
    "flock /tmp/own -c x --conflict-exit-code x rm -f F",
])
def test_a_double_dash_does_not_hide_the_command(command: str) -> None:
    need = approval_needed(command, DELETIONS)
    assert need is not None and need.rule == "deletions", (command, need)


@pytest.mark.parametrize("command", [
    # the value of the word, after quote removal and ANSI-C decoding, holds '$('
    "z=a[$'\\x24'\\(rm\\ -f\\ /tmp/x/m35\\)]", "z=a[$'\\044'\\(rm\\ F\\)]", "z=a[$'\\u0024'\\(rm\\ F\\)]",
    "z=a[$'\\U00000024''('rm\\ F\\)]", "z=a[$\\(rm\\ F\\)]", "echo a[$'\\x24'\\(rm\\ F\\)]",
    "printf -v z 'a[\\x24(rm -f F)]'", "printf -v z 'a[\\044(rm -f F)]'", "printf -v z 'a[\\x60rm F\\x60]'",
])
def test_a_substitution_spelled_with_escapes_asks(command: str) -> None:
    need = approval_needed(command, TRUSTED)
    assert need is not None and need.rule == "substitution-data", (command, need)


@pytest.mark.parametrize("command", [
    # ssh, scp and sftp options that run a local command, or read settings that may
    "ssh -o 'ProxyCommand=rm -f F' x true", "ssh -oProxyCommand='rm -f F' x", "ssh -o 'proxycommand rm F' x",
    "ssh -vo ProxyCommand=rm x", "ssh -o LocalCommand=rm -o PermitLocalCommand=yes x", "ssh -F cfg x",
    "ssh -Fcfg x", "ssh -o 'Match exec \"rm F\"' x", "ssh -o KnownHostsCommand=rm x", "ssh -o Include=/tmp/c x",
    "ssh -I /tmp/p11.so x", "scp -o ProxyCommand=rm a b:/tmp", "scp -S rm a b:/tmp", "scp -F cfg a b:c",
    "sftp -S rm b", "sftp -D /tmp/server b", "sftp -b /tmp/batch b", "sftp -o ProxyCommand=rm b",
    # other programs' options that run a command
    "zip -T -TT 'rm -f F #' z.zip src", "zip --unzip-command 'rm F' z.zip src",
    "tar --to-command='rm -f F' -xf x.tar", "tar --to-com='rm F' -xf x.tar",
    "tar --use-compress-program='rm -f F' -cf x.tar y", "tar -I 'rm -f F' -cf x.tar y",
    "tar -cI 'rm F' -f x.tar y", "tar cIf 'rm F' x.tar y", "tar --checkpoint-action=exec='rm -f F' -cf x.tar y",
    "tar -F /tmp/script -cf x.tar y", "tar --rsh-command=/tmp/r -cf h:x.tar y",
    "rsync -e 'rm -f F' a b:/tmp", "rsync --rsh='rm -f F' a b:/tmp", "rsync --rsh 'rm -f F' a b:/tmp",
    "rsync -avze 'rm -f F' a b:/tmp", "rsync -e 'ssh -o ProxyCommand=rm' a b:/tmp",
    "rsync --rsync-path='rm -f F' a b:/tmp", "git config core.sshCommand 'rm F'",
    "git config --global alias.st '!rm F'", "git config set core.pager 'rm F'", "git config core.fsmonitor /tmp/x",
    "git config include.path /tmp/c", "git -c core.sshCommand=rm fetch", "man -P 'rm F' ls", "man --pager='rm F' ls",
    "sort --compress-program=rm x", "sdiff --diff-program=rm a b", "wget --use-askpass=/tmp/x http://h/",
    "rpm -qa --pipe 'rm F'", "dpkg --post-invoke='rm F' -l", "apt-get update -o APT::Update::Pre-Invoke::=rm",
    "ed -s f <<< '!rm F'", "vim -es -c '!rm F' f", "ex -s f", "sqlite3 db '.shell rm F'",
    "sqlite3 db \"select load_extension('x.so')\"", "sqlite3 db < /tmp/cmds",
    # and the variables those programs read their commands or options from
    "RSYNC_RSH='rm F' rsync a b:c", "TAR_OPTIONS=--to-command=rm tar -xf x.tar", "ZIPOPT='-TT rm' zip z src",
    "SHELL=/tmp/sh script -qc true /dev/null", "export CVS_RSH=/tmp/x",
])
def test_options_that_run_a_command_ask(command: str) -> None:
    assert approval_needed(command, TRUSTED) is not None, command
    assert approval_needed(command, PROD) is not None, command  # whatever the named classes


@pytest.mark.parametrize("command", [
    "ssh x true", "ssh -o ConnectTimeout=5 -p 2222 x uptime", "ssh -F /dev/null x true", "ssh -F none x true",
    "scp -P 2222 a b:/tmp", "tar -tzf x.tgz", "tar --checkpoint=10 -tf x.tar", "zip -T z.zip src",
    "rsync -e ssh -n a b:c", "rsync -avz -e 'ssh -p 2222' -n a b:c", "git config user.email a@b",
    "git config core.pager", "git config --get alias.st", "man ls", "sort -o /tmp/attack-trust/ok/x y",
    "sqlite3 db 'select 1'",
])
def test_the_same_programs_without_those_options_do_not_ask(command: str) -> None:
    assert approval_needed(command, PROD) is None, command


@pytest.mark.parametrize("command", [
    # a re-attack set PATH through arithmetic that no NAME=value word shows
    "echo $[PATH=5]", "echo $[1+$[PATH=5]]", "x=abc; echo ${x:PATH=5}", "x=abc; echo ${x:1:PATH=5}",
    "echo ${@:PATH=5}", "echo ${a[1]:0:PATH=5}", "declare -i y='PATH=5'", "typeset -i y='PATH=5'",
    "local -i y='PATH=5'", "declare -ri y=PATH=5", "declare -i y; y='PATH=5'", "typeset -i y; y+=PATH=5",
    "declare -i y; for y in PATH=5; do :; done", "x=PATH=5; echo $((x))", "x=PATH=5; y=x; echo $((y))",
    "x=PATH=5; ((x))", "x=PATH=5; [[ $x -eq 1 ]]", "printf -v x PATH=5; echo $((x))",
    "printf -v x %s=5 PATH; echo $((x))", "printf -vx -- PATH=5; ((x))", "x=PATH=5; let y=x", "x=PATH=5; echo ${a[x]}",
    "coproc PATH { sleep 1; }", "coproc PATH ( sleep 1 )", "coproc IFS { sleep 1; }",
])
def test_variables_set_without_a_plain_assignment_ask(command: str) -> None:
    need = approval_needed(command, ATTACKED)
    assert need is not None and need.rule in ("environment", "lookup"), (command, need)


@pytest.mark.parametrize("command", [
    "x=abc; echo ${x:1:2}", "echo ${x: -1} ${x:-d} ${x:+b} ${#x}", "for i in 1 2; do echo $((i+1)); done",
    "n=5; ((n > 3))", "x=foo; [[ $x == foo ]]", "i=$((i+1)); echo $((i))", "declare -i n=5; n=n+1",
    "x=a=b; echo $((x))", "coproc sleep 1", "coproc X { sleep 1; }", "echo $[1+2]",
])
def test_arithmetic_that_assigns_nothing_risky_does_not_ask(command: str) -> None:
    assert approval_needed(command, ATTACKED) is None, command


@pytest.mark.parametrize("command", [
    "x=${y:-$'a[\\x24(rm F)]'}", "x=\"${y:-$'\\140rm F\\140'}\"", "echo ${y#$'\\u0024(rm F)'}",
])
def test_ansi_c_text_inside_an_expansion_is_decoded(command: str) -> None:
    assert approval_needed(command, ATTACKED) == approval_needed("x='a[$(rm F)]'", ATTACKED), command


@pytest.mark.parametrize("command", [
    # a re-attack glued the command text to a wrapper's option; the spaced forms were read
    "env -S'rm -f F'", "env -vS'rm F'", "env -iS'rm F'", "env -i -S'rm F'", "env --split-str='rm F'",
    "env --sp 'rm F'", "env -S x rm -f F", "env rm -S x F", "script -qc'rm F' /dev/null",
    "script -qec'rm F' /dev/null", "script --comm='rm F' /dev/null", "script -q /dev/null <<< 'rm F'",
    "flock /tmp/l -c'rm F'", "flock -w5 -c'rm F' /tmp/l", "flock /tmp/l --comm 'rm F'",
])
def test_glued_option_values_of_wrappers_are_read(command: str) -> None:
    assert approval_needed(command, DELETIONS) is not None, command


@pytest.mark.parametrize("command", ["env -S'ls -l'", "env -vS'ls'", "script -qc'ls' /dev/null",
                                     "flock /tmp/l -c'ls'", "env -i PATH_X=1 ls"])
def test_glued_option_values_that_run_nothing_risky_do_not_ask(command: str) -> None:
    assert approval_needed(command, DELETIONS) is None, command


@pytest.mark.parametrize("command", [
    # git runs the upload/receive program of a local or ssh remote, and the others, through a shell
    "git ls-remote --upload-pack='rm F' /srv/r", "git ls-remote -u 'rm F' /srv/r", "git fetch --upload-pack='rm F' /r",
    "git fetch --upload-p 'rm F' /r", "git pull --upload-pack 'rm F' /r", "git clone -u 'rm F' /r /tmp/c",
    "git clone --upload-pack='rm F' /r /tmp/c", "git clone -c core.fsmonitor='rm F' /r /tmp/c",
    "git push --receive-pack='rm F' /r", "git push --exec='rm F' /r", "git archive --exec='rm F' --remote=/r HEAD",
    "git archive --remote=/r HEAD", "git grep --open-files-in-pager='rm F' x", "git grep -O'rm F' x",
    "git grep -nO'rm F' x", "git difftool --extcmd='rm F'", "git difftool -x 'rm F'", "git mergetool --extcmd 'rm F'",
    "git rebase --exec 'rm F'", "git rebase -x 'rm F'", "git bisect run rm F", "git -C /r fetch --upload-pack='rm F'",
    "git -C /r -c x.y=1 ls-remote --upload-pack='rm F' /r", "git --git-dir=/r/.git push --receive-pack='rm F' o",
    "git send-email --sendmail-cmd='rm F' x.patch",
])
def test_git_options_that_run_a_command_ask(command: str) -> None:
    need = approval_needed(command, PROD)
    assert need is not None and need.rule == "unreadable", (command, need)


@pytest.mark.parametrize("command", ["git fetch origin", "git fetch -u origin", "git pull --rebase",
                                     "git grep -n -e O x", "git grep -eO x", "git push origin main",
                                     "git archive HEAD -o /tmp/x.tar", "git ls-remote origin"])
def test_git_without_those_options_does_not_ask(command: str) -> None:
    assert approval_needed(command, PROD) is None, command


@pytest.mark.parametrize("command", [
    # a re-attack assembled 'a[$(rm F)]' from pieces none of which holds '$('
    "printf -v x '%s(rm F)]' $'a[\\x24'", "printf -v x 'a[%c(rm F)]' '$'", "printf -v x 'a[\\x24%s' '(rm F)]'",
    "d=$'\\x24'; x=\"a[${d}(rm F)]\"", "d='$'; x=a[$d'(rm F)]'", "x='a[$'; y=\"${x}(rm F)]\"",
    "declare d=$'\\044'; x=\"a[${d}(rm F)]\"", "for d in '$'; do x=\"a[${d}(rm F)]\"; done",
])
def test_a_lone_dollar_joined_to_a_parenthesis_asks(command: str) -> None:
    need = approval_needed(command, ATTACKED)
    assert need is not None and need.rule == "substitution-data", (command, need)


@pytest.mark.parametrize("command", ["re='^foo$'; grep \"$re\" f", "printf '%s\\n' 'cost: $5 (est)'",
                                     "x='$HOME'; echo \"$x\"", "printf '%s$\\n' a"])
def test_a_dollar_that_joins_nothing_does_not_ask(command: str) -> None:
    assert approval_needed(command, ATTACKED) is None, command


@pytest.mark.parametrize("unit", ["${x:", "${x:-", '"${x:-', "${x:-$[", "${a[${b:"])
def test_deeply_nested_expansions_ask_and_never_raise(unit: str) -> None:
    need = approval_needed(unit * 2000, ATTACKED)
    assert need is not None and need.rule == "unreadable", need


@pytest.mark.parametrize("command", ["echo $'\\x'", "printf '\\x'", "echo $'\\u' $'\\U'", "x=$'a\\x'; echo $x"])
def test_an_escape_without_its_digits_is_read_as_bash_reads_it(command: str) -> None:
    # bash leaves `\x` with no hex digit as it is: reading it must neither fail nor ask.
    assert approval_needed(command, TRUSTED) is None, command
