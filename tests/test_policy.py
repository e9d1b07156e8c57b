"""The command policy: deny patterns, the executable allowlist and the shell-operator check."""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_bash.models import CommandPolicy, Host
from remote_bash.policy import PolicyDecision, check_command, host_in_allowlist

from .waiting import wait_for

READ_ONLY = CommandPolicy(allow=["cat", "ls"])
CHAINED = CommandPolicy(allow=["cat", "ls", "grep", "echo", "true", "/usr/bin/head"])
SINGLE = CommandPolicy(allow=["cat", "ls", "grep", "echo", "true", "head"], allow_operators=False)


def allowed(command: str, policy: CommandPolicy = CHAINED) -> bool:
    return check_command(command, policy).allowed


# --- deny ----------------------------------------------------------------------------------------


def test_deny_names_the_rule_by_index_and_pattern() -> None:
    policy = CommandPolicy(deny=[r"\bshutdown\b", r"rm\s+-rf\s+/"])
    decision = check_command("cd /tmp && rm  -rf /", policy)
    assert decision == PolicyDecision(
        False, r"deny[1]: rm\s+-rf\s+/", "the command matches this host's deny rule 'rm\\\\s+-rf\\\\s+/'"
    )
    assert check_command("ls /", policy) == PolicyDecision(
        True, "default", "no deny rule matched and this host has no allowlist"
    )


def test_deny_is_multiline() -> None:
    policy = CommandPolicy(deny=[r"^reboot$"])
    assert not check_command("echo hi\nreboot\necho bye", policy).allowed
    assert check_command("echo reboot now", policy).allowed


def test_deny_applies_before_the_allowlist() -> None:
    policy = CommandPolicy(allow=["cat"], deny=["shadow"])
    assert check_command("cat /etc/shadow", policy).rule == "deny[0]: shadow"


def test_invalid_deny_pattern_is_refused_where_the_policy_is_made() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"deny pattern '\(' cannot be used: it is not a valid regular "
                                              r"expression \(missing \): \(\)"):
        CommandPolicy(deny=["("])


def test_invalid_deny_pattern_refuses_everything() -> None:
    # One that got past the check anyway (a policy built without validation) still fails closed.
    decision = check_command("ls", CommandPolicy._trusted(deny=["("]))
    assert not decision.allowed
    assert decision.rule == "deny[0]: ("
    assert "not a valid regular expression" in decision.reason


def test_without_an_allowlist_unparsable_text_is_left_to_bash() -> None:
    assert check_command("echo 'unclosed", CommandPolicy()).allowed
    assert check_command("", CommandPolicy()).allowed


# --- allowlist -----------------------------------------------------------------------------------


def test_reason_names_the_command_and_the_allowlist() -> None:
    assert check_command("rm -rf /tmp/x", READ_ONLY) == PolicyDecision(
        False, "allow", "command 'rm' is not in this host's allowlist (allowed: cat, ls)"
    )
    assert check_command("ls -la /var/log", READ_ONLY) == PolicyDecision(
        True, "allow", "every command is in this host's allowlist"
    )


@pytest.mark.parametrize("command", ["ls -l", "\\ls", "'ls' -l", "if ls; then cat f; fi"])
def test_bare_names_match_name_entries(command: str) -> None:
    assert allowed(command, READ_ONLY)


@pytest.mark.parametrize("command", ["/bin/ls", "./ls -l", "/tmp/x/cat f", "'/tmp/x/cat' f", "../cat", "x/ls"])
def test_a_path_never_passes_for_a_name_entry(command: str) -> None:
    decision = check_command(command, READ_ONLY)
    assert not decision.allowed and decision.rule == "allow"
    assert "is named by a path" in decision.reason and "(allowed: cat, ls)" in decision.reason


def test_path_entries_match_that_exact_path_only() -> None:
    assert allowed("/usr/bin/head f")
    for command in ("head -n 3 f", "/bin/head f", "/usr/bin/../bin/head f", "/usr/bin//head f"):
        assert not allowed(command), command


@pytest.mark.parametrize(("command", "variable"), [
    ("LD_PRELOAD=/tmp/x.so cat /etc/hostname", "LD_PRELOAD"), ("PATH=/tmp cat f", "PATH"), ("PATH=/tmp", "PATH"),
    ("X=1 ls", "X"), ("A=1 B[2]=x C+=y cat f", "A"), ("B[2]=x cat", "B"), ("C+=y cat", "C"),
    ("arr=(a b c) ls", "arr"), ("ls; BASH_ENV=/tmp/x", "BASH_ENV"), ("echo $(LD_AUDIT=x ls)", "LD_AUDIT"),
    ("if true; then PYTHONPATH=/tmp cat f; fi", "PYTHONPATH"),
])
def test_assignments_are_refused_with_an_allowlist(command: str, variable: str) -> None:
    policy = CommandPolicy(allow=["cat", "ls", "echo", "true"])
    decision = check_command(command, policy)
    assert not decision.allowed and decision.rule == "allow", command
    assert decision.reason.startswith(f"the assignment {variable}=... is not allowed on this host")
    assert f"list '{variable}=' in allow" in decision.reason


def test_variables_listed_with_an_equals_sign_may_be_assigned() -> None:
    policy = CommandPolicy(allow=["sort", "LC_ALL="], allow_operators=False)
    assert check_command("LC_ALL=C sort f", policy).allowed
    assert not check_command("LC_ALL=C LD_PRELOAD=/tmp/x.so sort f", policy).allowed
    assert not check_command("LC_ALL=C /tmp/sort f", policy).allowed
    assert check_command("LC_ALL=C", policy).allowed  # a listed variable alone: only that variable changes


def test_the_attack_that_escaped_the_allowlist_is_refused() -> None:
    policy = CommandPolicy(allow=["cat", "ls", "echo"], allow_operators=False)
    for command in ("LD_PRELOAD=/tmp/rbev.so cat /etc/hostname", "PATH=/tmp cat /etc/hostname",
                    "/tmp/x/cat /etc/hostname", "./cat /etc/hostname"):
        assert not check_command(command, policy).allowed, command
    assert check_command("cat /etc/hostname", policy).allowed


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True), st.text(max_size=10),
       st.sampled_from(["cat", "ls", "echo"]))
def test_any_prefix_assignment_is_refused(name: str, value: str, command: str) -> None:
    text = f"{name}={shlex.quote(value)} {command} f"
    decision = check_command(text, CommandPolicy(allow=["cat", "ls", "echo"]))
    assert not decision.allowed and decision.rule == "allow", text


@pytest.mark.parametrize(
    "command",
    [
        "sudo ls",
        "env ls",
        "xargs ls",
        "nohup ls",
        "time ls",
        "exec ls",
        "command ls",
        "builtin ls",
        "eval ls",
        "bash -c ls",
        "sh -c 'ls'",
    ],
)
def test_wrappers_need_to_be_listed_themselves(command: str) -> None:
    decision = check_command(command, READ_ONLY)
    wrapper = shlex.split(command)[0]
    assert decision.reason == f"command {wrapper!r} is not in this host's allowlist (allowed: cat, ls)"


def test_a_listed_wrapper_allows_what_it_runs() -> None:
    assert allowed("sudo rm -rf /tmp/x", CommandPolicy(allow=["sudo"]))


@pytest.mark.parametrize(
    ("command", "culprit"),
    [
        ("cat a|rm x", "rm"),
        ("ls;rm x", "rm"),
        ("ls&&rm x", "rm"),
        ("ls||rm x", "rm"),
        ("ls&rm x", "rm"),
        ("ls|&rm x", "rm"),
        ("ls\nrm x", "rm"),
        ("ls \\\n; rm", "rm"),
        ("echo $(rm x)", "rm"),
        ("echo a$(rm x)b", "rm"),
        ("echo `rm x`", "rm"),
        ('echo "$(rm x)"', "rm"),
        ('echo "`rm x`"', "rm"),
        ("echo $(ls $(rm x))", "rm"),
        ("diff <(ls) <(rm x)", "rm"),
        ("ls > >(rm x)", "rm"),
        ("echo ${X:-$(rm x)}", "rm"),
        ("echo $((1 + $(rm x)))", "rm"),
        ("(rm x)", "rm"),
        ("{ ls; rm x; }", "rm"),
        ("if true; then rm x; fi", "rm"),
        ("! rm x", "rm"),
        ("{ rm x; }", "rm"),
        ("ls # c\nrm x", "rm"),
        ("cat <<EOF\n$(rm x)\nEOF", "rm"),
        ("cat <<EOF\nbody\nEOF\nrm x", "rm"),
        ("cat <<-EOF\n\tbody\n\tEOF\nrm x", "rm"),
        ("cat <<EOF\nbody\nEO\\\nF\nrm x\nEOF", "rm"),  # bash joins the continued line into EOF
        ("arr=(a $(rm x)) ls", "rm"),
        ("for i in 1 2; do ls; done", "for"),
        ("'r'm x", "rm"),
        ('"rm" x', "rm"),
    ],
)
def test_every_command_is_checked_even_glued_to_operators(command: str, culprit: str) -> None:
    decision = check_command(command, CHAINED)
    assert not decision.allowed
    assert decision.reason.startswith(f"command {culprit!r} is not in this host's allowlist")


@pytest.mark.parametrize(
    "command",
    [
        "echo 'a;rm x'",
        'echo "a|rm x && rm y"',
        "echo a\\;rm",
        "echo a\\|rm",
        "ls # ; rm x",
        "echo a#b",
        "echo '$HOME' 'rm x'",  # quoted '$(' or '`' is refused: see test_lookup_changes_and_text_runners_...
        "cat <<'EOF'\n$HOME\nrm y\nEOF",
        'cat <<"EOF"\nrm x\nEOF\n',
        "cat <<EOF\nrm x; reboot\nEOF",
        "echo $((1 + 2))",
        "((i = 1 << 2))",
        "if true; then ls; else cat f; fi",
        "{ ls; }",
        "ls 2>&1 | grep x > out 2>/dev/null",
        "echo ${HOME} $1 $@ $$",
        "grep -e 'x\\' f",
        "[ -f x ]",
    ],
)
def test_text_that_only_looks_like_commands(command: str) -> None:
    policy = CommandPolicy(allow=["cat", "ls", "grep", "echo", "true", "[", "i="])  # ((i = ...)) assigns i
    assert check_command(command, policy).allowed, command


@pytest.mark.parametrize(
    "command", ["$CMD x", "${CMD} x", "$(echo ls) x", "l? x", "l* x", "{rm,-rf,x}", "$'\\x72m' x"]
)
def test_names_built_by_expansion_are_refused(command: str) -> None:
    decision = check_command(command, CHAINED)
    assert not decision.allowed
    assert "only known after shell expansion" in decision.reason


@pytest.mark.parametrize(
    "command",
    [
        "echo 'open",
        'echo "open',
        "echo $(ls",
        "echo `ls",
        "echo ${x",
        "ls )",
        "ls >",
        "ls > ; x",
        "cat <<$X\nrm\n$X",
    ],
)
def test_unparsable_text_is_refused_with_an_allowlist(command: str) -> None:
    decision = check_command(command, CHAINED)
    assert not decision.allowed
    assert decision.reason.startswith("could not parse the command")


@pytest.mark.parametrize("command", ["", "   ", "\n\t"])
def test_empty_command(command: str) -> None:
    decision = check_command(command, READ_ONLY)
    assert (decision.allowed, decision.rule) == (False, "allow")
    assert "empty" in decision.reason


def test_deep_nesting_is_refused_not_a_crash() -> None:
    assert not allowed("echo " + "$(" * 2000 + "ls" + ")" * 2000)
    assert not allowed("echo " + '"$(' * 2000)


def test_double_paren_that_opens_a_subshell_is_read_as_one() -> None:
    assert allowed("echo $((ls) )")
    assert check_command("echo $((ls) (rm x))", CHAINED).reason.startswith("command 'rm'")
    assert check_command("echo $((ls) )", SINGLE).rule == "allow_operators: $("
    nested = "x"
    for _ in range(40):  # each level would double the work if it were read again from scratch
        nested = f"$(({nested}) )"
    assert not allowed("echo " + nested)


# --- allow_operators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "operator"),
    [
        ("cat a|grep x", "|"),
        ("ls;ls", ";"),
        ("ls&&ls", "&&"),
        ("ls||ls", "||"),
        ("ls&ls", "&"),
        ("ls\nls", "newline"),
        ("echo $(ls)", "$("),
        ("echo `ls`", "`"),
        ("cat <(ls)", "<("),
        ("ls >(cat)", ">("),
        ('echo "$(ls)"', "$("),
    ],
)
def test_operators_refused_when_not_allowed(command: str, operator: str) -> None:
    decision = check_command(command, SINGLE)
    assert not decision.allowed
    assert decision.rule == f"allow_operators: {operator}"
    assert "is not allowed on this host" in decision.reason
    assert allowed(command, CHAINED)


@pytest.mark.parametrize(
    "command",
    [
        "ls -l",
        "ls 2>&1",
        "ls &>/dev/null",
        "ls >out 2>>err </dev/null",
        "grep x <<<'a;b'",
        "cat <<EOF\nx | y\nEOF\n",
        "ls;",
        "ls\n",
        "echo 'a && b'",
        "echo $((2*3))",
    ],
)
def test_redirections_and_trailing_separators_are_not_chaining(command: str) -> None:
    assert check_command(command, SINGLE).allowed, command


def test_operators_are_only_checked_with_an_allowlist() -> None:
    assert check_command("ls; rm x", CommandPolicy(allow_operators=False)).allowed


# --- host allowlist ------------------------------------------------------------------------------


def test_host_in_allowlist() -> None:
    assert host_in_allowlist("web-1", None)
    assert host_in_allowlist("web-1", {"web-1", "db-1"})
    assert not host_in_allowlist("web-2", ["web-1"])
    assert not host_in_allowlist("web-1", [])


def test_decision_is_frozen() -> None:
    decision = check_command("ls", READ_ONLY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = False  # type: ignore[misc]


# --- properties ----------------------------------------------------------------------------------

POLICIES = [
    CommandPolicy(),
    CommandPolicy(deny=["rm", "^x$"]),
    CHAINED,
    SINGLE,
    CommandPolicy(allow=[]),
]
shellish = st.text(alphabet="ab ;&|<>()$`'\"\\\n#{}=*?!-EOF", max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), shellish), st.sampled_from(POLICIES))
def test_never_raises(command: str, policy: CommandPolicy) -> None:
    decision = check_command(command, policy)
    assert isinstance(decision.allowed, bool)
    assert decision.reason


ALLOWED = ["cat", "ls", "grep", "echo", "true"]
OPERATORS = [";", "&&", "||", "|", "&", "\n", " ; ", " && ", " | ", "|&"]
simple = st.builds(
    lambda name, args: " ".join([name, *(shlex.quote(a) for a in args)]),
    st.sampled_from(ALLOWED),
    # Arguments without command substitution, nor what the policy reads as an expansion or as
    # arithmetic even inside quotes (`${x:=y}`, a subscript `a[...]`, `$[...]`): those it refuses on
    # purpose, since `let`, `[[ -eq ]]` and `declare -i` evaluate quoted text (a refusal, never a hole).
    st.lists(st.text(max_size=8).filter(lambda a: not any(s in a for s in ("$(", "`", "${", "[", "$["))), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(simple, min_size=2, max_size=5), st.lists(st.sampled_from(OPERATORS), min_size=4, max_size=4))
def test_allowed_commands_joined_by_operators(commands: list[str], operators: list[str]) -> None:
    text = commands[0] + "".join(op + cmd for op, cmd in zip(operators, commands[1:], strict=False))
    assert check_command(text, CHAINED).allowed
    refused = check_command(text, SINGLE)
    assert not refused.allowed
    used = {"newline" if op == "\n" else op.strip() for op in operators[: len(commands) - 1]}
    assert refused.rule.removeprefix("allow_operators: ") in used


@settings(max_examples=200, deadline=None)
@given(
    st.lists(simple, min_size=1, max_size=4),
    st.integers(min_value=0, max_value=4),
    st.sampled_from([*OPERATORS, "$(", "`", "<("]),
)
def test_a_disallowed_command_anywhere_is_refused(commands: list[str], where: int, operator: str) -> None:
    closing = {"$(": ")", "`": "`", "<(": ")"}.get(operator)
    intruder = "rm -f x"
    if closing:
        intruder = f"{operator}{intruder}{closing}"
        commands.insert(min(where, len(commands)), "echo " + intruder)
        text = " ; ".join(commands)
    else:
        commands.insert(min(where, len(commands)), intruder)
        text = operator.join(commands)
    decision = check_command(text, CHAINED)
    assert not decision.allowed
    assert "'rm'" in decision.reason


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ALLOWED), st.lists(st.text(max_size=20), max_size=4))
def test_quoted_arguments_never_add_commands(name: str, args: list[str]) -> None:
    text = shlex.join([name, *args])
    carries = any("$(" in a or "`" in a for a in args)  # data bash may later evaluate: refused
    # Text that may be arithmetic (a subscript 'A[', '((', 'let ') is read for the variables it
    # would assign, across quotes: it may be refused too, so the property holds for the rest.
    arithmetic = any(mark in text for mark in ("[", "((", "let", "${"))
    if carries or not arithmetic:
        assert check_command(text, SINGLE).allowed is not carries


@pytest.mark.parametrize(
    "command",
    [
        "echo \"${x:-'$(id -un; touch /tmp/rb_pwned)'}\"",
        "echo \"${x:-'`id -u`'}\"",
        "echo \"${x:-${y:-'$(id)'}}\"",
    ],
)
def test_substitution_between_single_quotes_inside_double_quoted_braces_is_seen(command: str) -> None:
    # In "${x:-'...'}" the single quotes are plain characters: bash runs what is between them.
    decision = check_command(command, CommandPolicy(allow=["echo", "ls"], allow_operators=False))
    assert not decision.allowed


@pytest.mark.parametrize("command", [
    "cat() { echo $(( $1 )); }", "ls () { :; }", "function cat { echo; }", "function echo() { :; }",
    "echo x; grep() { cat; }",
])
def test_function_definitions_are_refused(command: str) -> None:
    decision = check_command(command, CHAINED)
    assert not decision.allowed and "function" in decision.reason, decision


LISTED = CommandPolicy(allow=["cat", "ls", "echo", "awk", "hash", "shopt", "enable", "alias", "mapfile", "readarray",
                              "compgen", "complete", "bind", "fc", "let", "set", "BASH_CMDS=", "BASH_ALIASES=",
                              "a="])  # mapfile -t a assigns a


@pytest.mark.parametrize("command", [
    "hash -p /bin/rm ls", "set -k", "BASH_CMDS[ls]=/bin/rm", "BASH_ALIASES[ls]='rm -f'", "shopt -s expand_aliases",
    "enable -n echo", "enable -f x.so y", "alias ls='rm -f'", "mapfile -C 'rm -f F #' -c 1 < x",
    "readarray -tC 'rm F' < x", "compgen -C 'rm -f F' x", "complete -F f x", "bind -x '\"a\":rm F'", "fc -e rm",
    "let 'a[$(rm -f F)]=1'", "echo 'a[$(rm -f F)]'", "cat <<< 'a[`rm F`]'", "echo $'\\x24(rm F)'",
    "cat <<'EOF'\n$(rm x)\nEOF", "echo '`rm x`'", "awk 1 'a[$(rm F)]'",
])
def test_lookup_changes_and_text_runners_are_refused_even_when_listed(command: str) -> None:
    assert not check_command(command, LISTED).allowed, command


@pytest.mark.parametrize("command", ["hash", "hash -r", "shopt -s extglob", "enable", "alias", "mapfile -t a < x",
                                     "echo '$HOME'", "cat 'a[1]'", "echo $'a\\tb'",
                                     "awk '{print $(NF-1)}' x"])
def test_listed_builtins_used_plainly_pass(command: str) -> None:
    assert check_command(command, LISTED).allowed, command


# --- live: through real sshd ---------------------------------------------------------------------


async def test_the_ld_preload_escape_is_refused_before_anything_is_sent(web1: Host, tmp_path: Path) -> None:
    from remote_bash import BashTool, PolicyDenied, RemoteBashSession
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path / "audit")
    host = web1.model_copy(update={"policy": CommandPolicy(allow=["cat", "ls", "echo"], allow_operators=False)})
    sent = Path(f"/tmp/rb-policy-sent-{os.getpid()}")
    never = Path(f"/tmp/rb-policy-never-{os.getpid()}")
    try:
        async with RemoteBashSession(host, audit=audit) as s:
            # An allowed command with the same redirection does reach the host: the file appears.
            assert (await s.run(f"cat /etc/hostname > {sent}")).exit_code == 0
            await wait_for(sent.exists, within=10, what="the allowed command's file")
            with pytest.raises(PolicyDenied) as refused:
                await s.run(f"LD_PRELOAD=/tmp/rbev.so cat /etc/hostname > {never}")
            assert refused.value.host == "web-1" and "LD_PRELOAD" in str(refused.value)
            assert str(refused.value).startswith("web-1: the assignment LD_PRELOAD=...")
            block = await BashTool(s).handle({"id": "toolu_p", "name": "bash",
                                              "input": {"command": f"PATH=/tmp cat /etc/hostname > {never}"}})
            assert block["is_error"] and "PATH=" in block["content"]
            assert (await s.run("echo still-here")).output == "still-here\n"
        assert not never.exists()
        records = list(audit.read("web-1"))
        started = [r["command"] for r in records if r["event"] == "exec.start"]
        assert not [c for c in started if "LD_PRELOAD" in c or "PATH=" in c], started
        assert [r["rule"] for r in records if r["event"] == "policy.denied"] == ["allow", "allow"]
    finally:
        for path in (sent, never):
            path.unlink(missing_ok=True)


async def test_a_function_shadowing_an_allowed_name_is_refused_before_anything_is_sent(web1: Host,
                                                                                      tmp_path: Path) -> None:
    from remote_bash import PolicyDenied, RemoteBashSession
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path / "audit")
    policy = CommandPolicy(allow=["cat", "ls", "echo", "true", "grep", "wc"], allow_operators=True)
    host = web1.model_copy(update={"policy": policy})
    victim = Path(f"/tmp/rb-policy-fn-{os.getpid()}")
    victim.write_text("keep\n")
    try:
        async with RemoteBashSession(host, audit=audit) as s:
            with pytest.raises(PolicyDenied) as refused:
                await s.run("cat() { echo $(( $1 )); }")
            assert "function" in str(refused.value)
            with pytest.raises(PolicyDenied):
                await s.run(f"cat 'a[$(rm -f {victim})]'")
            # Nothing was defined: cat is still cat.
            assert (await s.run(f"cat {victim}")).output == "keep\n"
        assert victim.exists()
        started = [r["command"] for r in audit.read("web-1") if r["event"] == "exec.start"]
        assert started == [f"cat {victim}"], started
    finally:
        victim.unlink(missing_ok=True)


@pytest.mark.parametrize("command", [
    "echo a[$'\\x24'\\(rm\\ -f\\ F\\)]", "echo a[$'\\044'\\(rm\\ F\\)]", "echo a[$'\\u0024'\\(rm\\ F\\)]",
    "echo a[$'\\x24''('rm\\ F\\)]",
])
def test_a_dollar_spelled_in_ansi_c_quotes_joined_to_a_parenthesis_is_refused(command: str) -> None:
    # the word's value is a[$(rm F)], which bash runs if it is ever used in arithmetic
    decision = check_command(command, CHAINED)
    assert not decision.allowed and "'$('" in decision.reason, decision


# --- assignments in any form, and '$(' assembled by printf ---------------------------------------

ATTACKED = CommandPolicy(allow=["cat", "ls", "echo", "printf", "test", "[", "true"], allow_operators=False)


@pytest.mark.parametrize("command", [
    "printf -v x 'a[%c(touch /tmp/PWN)]' '$'", "printf -v z '%b' 'a[\\x24(touch F)]'",
    "printf -v y a[%c%s] $ '(whoami >&2)'", "printf 'a[%c(touch F)]' '$'", "printf '%b' 'a[\\x24(touch F)]'",
    "printf '%b' 'a[\\044(touch F)]'", "printf '\\x60touch F\\x60'",
])
def test_printf_assembling_a_command_substitution_is_refused(command: str) -> None:
    decision = check_command(command, ATTACKED)
    assert not decision.allowed and decision.rule == "allow", (command, decision)
    assert "'$('" in decision.reason, decision


@pytest.mark.parametrize(("command", "variable"), [
    ("printf -v PATH %s /nonexistent", "PATH"), ("echo $((PATH=5))", "PATH"), ("echo $[PATH=7]", "PATH"),
    ("echo ${HOME:0:PATH=3}", "PATH"), ("test -v 'a[PATH=9]'", "PATH"), ("echo hi {PATH}>/dev/null", "PATH"),
    ("printf -v LD_PRELOAD %s /tmp/x.so", "LD_PRELOAD"), ("printf -v BASH_ENV %s /tmp/x", "BASH_ENV"),
    ("printf -v IFS %s /", "IFS"), ("printf -vPATH %s /tmp", "PATH"), ("printf -v x %s 1", "x"),
    ("echo ${x:=1}", "x"), ("echo $((i++))", "i"), ("echo $((--i))", "i"), ("echo $((x+=1))", "x"),
    ("[ -v 'a[PATH=9]' ]", "PATH"), ("echo ${HOME:PATH=1}", "PATH"), ("echo \"$((PATH=5))\"", "PATH"),
])
def test_every_form_of_assignment_is_refused_with_an_allowlist(command: str, variable: str) -> None:
    decision = check_command(command, ATTACKED)
    assert not decision.allowed and decision.rule == "allow", (command, decision)
    assert f"list '{variable}=' in allow" in decision.reason, decision


@pytest.mark.parametrize("command", ["echo $(($x=5))", "echo ${!r:=1}"])
def test_an_assignment_to_a_name_built_by_expansion_is_refused(command: str) -> None:
    decision = check_command(command, ATTACKED)
    assert not decision.allowed and "known only after expansion" in decision.reason, decision


@pytest.mark.parametrize(("command", "allow"), [
    ("read x", ["read"]), ("read -r -a arr", ["read"]), ("mapfile lines < f", ["mapfile"]),
    ("unset HOME", ["unset"]), ("getopts ab opt", ["getopts"]), ("wait -p pid", ["wait"]),
    ("let PATH=5", ["let"]), ("((PATH = 5))", []), ("export PATH", ["export"]), ("declare x=1", ["declare"]),
    ("local -n r=PATH", ["local"]), ("env LD_PRELOAD=/tmp/x.so cat f", ["env", "cat"]),
])
def test_builtins_that_assign_by_name_are_refused_even_when_listed(command: str, allow: list[str]) -> None:
    decision = check_command(command, CommandPolicy(allow=allow))
    assert not decision.allowed and decision.rule == "allow", (command, decision)


@pytest.mark.parametrize("command", [
    "printf '%s\\n' a", "printf 'cost: $5 (est)\\n'", "printf '%d items\\n' 3", "echo $((1+2))",
    "echo $(( 7 * (2 + 1) ))", "test -f /etc/hosts", "[ -f /etc/hosts ]", "test 3 -eq 3", "echo ${HOME:0:3}",
    "echo ${HOME:-/root}", "cat 'a[1]'", "echo a == b", "ls -l", "echo $[1+2]",
])
def test_plain_commands_that_assign_nothing_still_pass(command: str) -> None:
    decision = check_command(command, ATTACKED)
    assert decision.allowed, (command, decision)


def test_a_listed_variable_may_be_assigned_in_any_form() -> None:
    policy = CommandPolicy(allow=["echo", "printf", "read", "i="])
    for command in ("echo $((i++))", "printf -v i %s 1", "read i", "echo ${i:=0}"):
        assert check_command(command, policy).allowed, command
    assert not check_command("printf -v i 'a[%c(touch F)]' '$'", policy).allowed


async def test_assembled_substitutions_and_assignments_never_reach_the_host(web1: Host, tmp_path: Path) -> None:
    from remote_bash import PolicyDenied, RemoteBashSession
    from remote_bash.audit import AuditLog

    audit = AuditLog(tmp_path / "audit")
    host = web1.model_copy(update={"policy": ATTACKED})
    made = Path(f"/tmp/rb-policy-pwn-{os.getpid()}")
    refused_forms = [f"printf -v x 'a[%c(touch {made})]' '$'", f"printf -v z '%b' 'a[\\x24(touch {made})]'",
                     "printf -v PATH %s /nonexistent", "echo $((PATH=5))", "echo $[PATH=7]",
                     "echo hi {PATH}>/dev/null", "test -v 'a[PATH=9]'"]
    try:
        async with RemoteBashSession(host, audit=audit) as s:
            for command in refused_forms:
                with pytest.raises(PolicyDenied):
                    await s.run(command)
            # Had any of them run, x or z would now touch the file, or PATH would have no ls.
            assert (await s.run("echo $((x)) $((z))")).output == "0 0\n"
            listed = await s.run("ls -d /")
            assert (listed.exit_code, listed.output) == (0, "/\n")
        assert not made.exists()
        started = [r["command"] for r in audit.read("web-1") if r["event"] == "exec.start"]
        assert started == ["echo $((x)) $((z))", "ls -d /"], started
    finally:
        made.unlink(missing_ok=True)
