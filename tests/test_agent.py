"""The agent loop against a real sshd (the tests' fixtures) and the real SDK talking HTTP to a
scripted Messages endpoint (tests/messages_server.py)."""

from __future__ import annotations

import asyncio
import json
import pwd
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from remote_bash import BashTool, CommandPolicy, Host, RemoteBashSession
from remote_bash.agent import (
    AgentConfig,
    AgentError,
    AgentEvent,
    AgentOutcome,
    TokenUsage,
    estimate_cost,
    run_agent,
)

from .messages_server import Fail, MessagesServer, Reply, StreamFail, text, tool_use
from .sshd import TestHosts, processes_with
from .waiting import wait_for

MODEL = "claude-sonnet-5"


@pytest.fixture
async def client(server: MessagesServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=2) as c:
        yield c


@pytest.fixture
def config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(model=MODEL, transcript=tmp_path / "transcript.jsonl")


@pytest.fixture
def home(hosts: TestHosts) -> Path:
    """The remote user's home directory (the sshd hosts are local)."""
    return Path(pwd.getpwnam(hosts.user).pw_dir)


@pytest.fixture
def mark(home: Path) -> Iterator[str]:
    """A unique file name prefix in the remote home; the files are removed afterwards."""
    name = f"rbagent{uuid.uuid4().hex[:10]}"
    yield name
    for path in home.glob(f"{name}*"):
        path.unlink()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def run(task: str, session: RemoteBashSession, config: AgentConfig, client: anthropic.AsyncAnthropic,
              **kwargs: Any) -> tuple[AgentOutcome, list[AgentEvent]]:
    events: list[AgentEvent] = []
    outcome = await run_agent(task, session, config, client=client, on_event=events.append, **kwargs)
    return outcome, events


# -- the loop --------------------------------------------------------------------------------


async def test_several_tool_uses_answered_in_one_message_in_order(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic,
    config: AgentConfig, home: Path, mark: str,
) -> None:
    uses = [tool_use({"command": f"echo first > ~/{mark}; cd /tmp"}),
            tool_use({"command": f"cat ~/{mark}; pwd"}),
            tool_use({"command": "echo to-stderr >&2"})]
    server.add(Reply([text("I will look around."), *uses]), Reply([text("All done.")]))
    outcome, events = await run("look around", session, config, client)

    assert outcome.stop_reason == "end_turn"
    assert outcome.final_text == "All done."
    assert outcome.turns == 2
    assert len(server.requests) == 2
    assert (home / mark).read_text() == "first\n"
    results = server.tool_results(1)
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
    assert [r["content"] for r in results] == ["(no output)", "first\n/tmp\n", "to-stderr\n"]
    assert not any(r["is_error"] for r in results)
    # One user message answers the whole reply; the conversation alternates.
    roles = [m["role"] for m in server.requests[1]["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert server.requests[1]["messages"][1]["content"][1:] == uses

    (system,) = server.requests[0]["system"]
    assert system["cache_control"] == {"type": "ephemeral"}
    assert outcome.usage == TokenUsage(input_tokens=200, output_tokens=40)
    assert outcome.cost_usd == pytest.approx(estimate_cost(MODEL, outcome.usage))
    kinds = [e.kind for e in events]
    assert kinds[0] == "text"
    assert kinds[-1] == "stop"
    assert kinds.count("command") == 3
    assert kinds.count("result") == 3
    assert "".join(e.text for e in events if e.kind == "text") == "I will look around.All done."
    second = [e for e in events if e.tool_use_id == uses[1]["id"]]
    # Output streams in chunks (how many depends on reads and line boundaries); together they are
    # the command's output, between its command and result events.
    kinds_second = [e.kind for e in second]
    assert kinds_second[0] == "command" and kinds_second[-1] == "result"
    assert set(kinds_second[1:-1]) == {"output"}
    assert second[0].command == f"cat ~/{mark}; pwd"
    assert "".join(e.text for e in second[1:-1]) == "first\n/tmp\n"
    assert second[-1].exit_code == 0
    assert second[-1].duration is not None
    assert not second[-1].is_error


async def test_system_prompt_tools_and_prompt_caching(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, tmp_path: Path,
) -> None:
    config = AgentConfig(model=MODEL, transcript=tmp_path / "t.jsonl", system_extra="House rule: no reboots.",
                         max_tokens=1234)
    server.add(Reply([tool_use({"command": "true"})]), Reply([text("ok")]))
    await run("check", session, config, client)

    first, second = server.requests
    assert first["model"] == MODEL
    assert first["max_tokens"] == 1234
    assert first["stream"] is True
    assert first["tools"] == [{"type": "bash_20250124", "name": "bash"},
                              {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]
    prompt, extra = first["system"]
    assert session.info is not None
    info = session.info
    for fact in ("web-1", session.host.hostname, info.os, info.bash_version, info.user, "120 s", "600 s",
                 "30,000 characters", "policy", "real machine"):
        assert fact in prompt["text"], fact
    assert "cache_control" not in prompt
    assert extra == {"type": "text", "text": "House rule: no reboots.",
                     "cache_control": {"type": "ephemeral"}}
    assert second["system"] == first["system"]
    assert second["tools"] == first["tools"]
    # The conversation carries one moving breakpoint: on the newest block only.
    assert first["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "check", "cache_control": {"type": "ephemeral"}}]}]
    marked = [b for m in second["messages"] for b in m["content"]
              if isinstance(b, dict) and "cache_control" in b]
    assert marked == [second["messages"][-1]["content"][-1]]
    assert second["messages"][0]["content"] == "check"


async def test_restart_gives_a_clean_shell(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    home: Path,
) -> None:
    assert session.info is not None
    old_pid = session.info.shell_pid
    server.add(Reply([tool_use({"command": "export RB_AGENT_VAR=set; cd /tmp"}), tool_use({"restart": True}),
                      tool_use({"command": 'echo "[$RB_AGENT_VAR]"; pwd'})]),
               Reply([text("ok")]))
    outcome, events = await run("restart it", session, config, client)
    assert outcome.stop_reason == "end_turn"
    _, restarted, after = server.tool_results(1)
    assert restarted["is_error"] is False
    assert "restarted" in restarted["content"]
    assert after["content"] == f"[]\n{home}\n"
    assert session.info.shell_pid != old_pid
    assert [e.command for e in events if e.kind == "command"][1] is None


async def test_failing_command_is_an_error_result_and_the_run_goes_on(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    server.add(Reply([tool_use({"command": "ls /no/such/dir"})]), Reply([text("It is missing.")]))
    outcome, events = await run("list it", session, config, client)
    (result,) = server.tool_results(1)
    assert result["is_error"] is True
    assert "No such file or directory" in result["content"]
    assert result["content"].endswith("Exit status 2")
    assert outcome.stop_reason == "end_turn"
    (done,) = [e for e in events if e.kind == "result"]
    assert done.is_error
    assert done.exit_code == 2


@pytest.mark.parametrize("then", [" && ", "\n", "; "])
async def test_timeout_kills_the_command(
    hosts: TestHosts, web1: Host, server: MessagesServer, client: anthropic.AsyncAnthropic,
    config: AgentConfig,
    home: Path, mark: str, then: str,
) -> None:
    host = hosts.host("web-1", command_timeout=1, max_timeout=2)
    server.add(Reply([tool_use({"command": f"bash -c 'sleep 30; : {mark}'{then}touch ~/{mark}"})]),
               Reply([text("slow")]))
    async with RemoteBashSession(host, kill_grace=0.3) as slow:
        outcome, _ = await run("wait", slow, config, client)
        assert "within 1 s" in server.requests[0]["system"][0]["text"]
    (result,) = server.tool_results(1)
    assert result["is_error"] is True
    assert "did not finish within 1 s" in result["content"]
    assert outcome.stop_reason == "end_turn"
    await wait_for(lambda: not processes_with(mark, hosts.user), within=10, what="the timed-out command to be killed",
                   show=lambda: processes_with(mark, hosts.user))
    assert not (home / mark).exists()


async def test_policy_refusal_runs_nothing(
    hosts: TestHosts, web1: Host, server: MessagesServer, client: anthropic.AsyncAnthropic,
    config: AgentConfig,
    home: Path, mark: str,
) -> None:
    host = hosts.host("web-1", policy=CommandPolicy(deny=[r"\brm\s+-rf\b"]))
    server.add(Reply([tool_use({"command": f"touch ~/{mark} && rm -rf ~/{mark}.d"}),
                      tool_use({"command": "echo allowed"})]),
               Reply([text("refused")]))
    async with RemoteBashSession(host) as guarded:
        await run("clean up", guarded, config, client)
    refused, allowed = server.tool_results(1)
    assert refused["is_error"] is True
    assert refused["content"].startswith("Error: refused before running: ")
    assert "deny rule" in refused["content"]
    assert "rm" in refused["content"]
    assert not (home / mark).exists()
    assert (allowed["content"], allowed["is_error"]) == ("allowed\n", False)


async def test_unknown_tool_name_is_an_error_result(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    home: Path, mark: str,
) -> None:
    server.add(Reply([tool_use({"command": f"touch ~/{mark}"}, name="python"),
                      tool_use({"command": "echo hi"})]),
               Reply([text("ok")]))
    outcome, _ = await run("go", session, config, client)
    unknown, known = server.tool_results(1)
    assert unknown["is_error"] is True
    assert "unknown tool 'python'" in unknown["content"]
    assert known["content"] == "hi\n"
    assert not (home / mark).exists()
    assert outcome.stop_reason == "end_turn"


async def test_a_lone_surrogate_from_claude_is_kept_in_the_transcript(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    """Not valid UTF-8, so the transcript could not be written: the run crashed and lost the response."""
    server.add(Reply([text("hello \ud800 world"), tool_use({"command": "echo hi"})]), Reply([text("done")]))
    outcome, _ = await run("go", session, config, client)
    assert outcome.stop_reason == "end_turn"
    assert config.transcript is not None
    responses = [json.loads(line) for line in config.transcript.read_text().splitlines()
                 if json.loads(line)["type"] == "response"]
    assert responses[0]["message"]["content"][0]["text"] == "hello \ud800 world"


async def test_a_lone_surrogate_in_a_tool_use_id_does_not_stop_the_run_after_the_command(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    """The command ran; sending its result back then failed on the id, and the run said nothing ran."""
    server.add(Reply([tool_use({"command": "echo ran"}, id="toolu_\ud800")]), Reply([text("done")]))
    outcome, _ = await run("go", session, config, client)
    assert outcome.stop_reason == "end_turn"
    (result,) = server.tool_results(1)
    assert result["content"] == "ran\n" and result["tool_use_id"] == "toolu_\ufffd"


async def test_a_tool_input_the_sdk_cannot_read_is_a_clear_error(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    home: Path, mark: str,
) -> None:
    server.add(Reply([tool_use({"command": f"touch ~/{mark} \udc80"})]))
    with pytest.raises(AgentError, match=r"response could not be read.*nothing of it was run") as info:
        await run("go", session, config, client)
    assert str(config.transcript) in str(info.value)
    assert not (home / mark).exists()


# -- limits and stops ------------------------------------------------------------------------


def forever(body: dict[str, Any]) -> Reply:
    return Reply([tool_use({"command": "echo again"})])


async def test_max_turns(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, tmp_path: Path,
) -> None:
    config = AgentConfig(model=MODEL, transcript=tmp_path / "t.jsonl", max_turns=3)
    server.add(*[forever] * 3)
    outcome, events = await run("loop", session, config, client)
    assert outcome.stop_reason == "max_turns"
    assert outcome.turns == 3
    assert len(server.requests) == 3
    # The tools of the last reply ran and their results are in the transcript, so a resume can go on.
    assert [e.kind for e in events].count("result") == 3
    assert [r["type"] for r in lines(outcome.transcript)][-2:] == ["tool_results", "stop"]


async def test_token_budget(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, tmp_path: Path,
) -> None:
    config = AgentConfig(model=MODEL, transcript=tmp_path / "t.jsonl", token_budget=250)
    server.add(*[forever] * 3)
    outcome, _ = await run("loop", session, config, client)
    assert outcome.stop_reason == "token_budget"
    assert outcome.turns == 3
    assert outcome.usage.total == 360
    assert "250" in outcome.message


async def test_cost_budget(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, tmp_path: Path,
) -> None:
    config = AgentConfig(model="claude-opus-5", transcript=tmp_path / "t.jsonl", cost_budget_usd=1.0)
    server.add(Reply([tool_use({"command": "true"})], usage={"input_tokens": 150_000, "output_tokens": 10_000,
                                                             "cache_read_input_tokens": 100_000}))
    outcome, _ = await run("spend", session, config, client)
    assert outcome.stop_reason == "cost_budget"
    assert outcome.turns == 1
    assert outcome.cost_usd == pytest.approx((150_000 * 5 + 10_000 * 25 + 100_000 * 0.5) / 1e6)
    assert "estimate" in outcome.message


def test_estimate_cost_by_family() -> None:
    million = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert estimate_cost("claude-sonnet-5", million) == pytest.approx(18.0)
    assert estimate_cost("claude-opus-4-8", million) == pytest.approx(30.0)
    assert estimate_cost("claude-opus-4-1", million) == pytest.approx(90.0)
    assert estimate_cost("claude-haiku-4-5", million) == pytest.approx(6.0)
    assert estimate_cost("some-new-model", million) == pytest.approx(60.0)  # priced as the dearest
    cached = TokenUsage(cache_creation_input_tokens=1_000_000, cache_read_input_tokens=1_000_000)
    assert estimate_cost("claude-sonnet-5", cached) == pytest.approx(3.75 + 0.3)


async def test_max_tokens_stop_is_reported(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    server.add(Reply([text("A very long answ")], stop_reason="max_tokens"))
    outcome, events = await run("explain", session, config, client)
    assert outcome.stop_reason == "max_tokens"
    assert "max_tokens" in outcome.message
    assert outcome.final_text == "A very long answ"
    assert events[-1].kind == "stop"
    assert events[-1].text == outcome.message


# -- API errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "error_type"), [(429, "rate_limit_error"), (529, "overloaded_error")])
async def test_transient_error_is_retried_by_the_sdk(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    status: int, error_type: str,
) -> None:
    server.add(Fail(status, error_type, headers={"retry-after": "0"}), Reply([text("fine")]))
    outcome, _ = await run("hello", session, config, client)
    assert outcome.stop_reason == "end_turn"
    assert outcome.turns == 1
    assert len(server.requests) == 2
    assert server.requests[0] == server.requests[1]
    assert [h["x-stainless-retry-count"] for h in server.headers] == ["0", "1"]


async def test_bad_request_ends_the_run_with_a_saved_transcript(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    home: Path, mark: str,
) -> None:
    server.add(Reply([tool_use({"command": f"echo x >> ~/{mark}"})]),
               Fail(400, "invalid_request_error", "messages.1: something is wrong"))
    events: list[AgentEvent] = []
    with pytest.raises(AgentError) as info:
        await run_agent("go", session, config, client=client, on_event=events.append)
    message = str(info.value)
    assert "\n" not in message
    assert "400 invalid_request_error: messages.1: something is wrong" in message
    assert str(config.transcript) in message
    assert info.value.transcript == config.transcript
    assert len(server.requests) == 2  # a 400 is not retried
    assert (home / mark).read_text() == "x\n"
    assert info.value.transcript is not None
    assert [r["type"] for r in lines(info.value.transcript)] == [
        "meta", "request", "response", "command", "tool_results", "request", "error"]
    assert events[-1].kind == "error"


async def test_authentication_error_names_the_key(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    server.add(Fail(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(AgentError, match=r"401 authentication_error.*ANTHROPIC_API_KEY"):
        await run_agent("go", session, config, client=client)
    assert len(server.requests) == 1


async def test_error_in_the_middle_of_a_stream(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    server.add(StreamFail("overloaded_error", "Overloaded"))
    with pytest.raises(AgentError, match=r"overloaded_error: Overloaded.*resume"):
        await run_agent("go", session, config, client=client)


async def test_client_from_the_environment(
    session: RemoteBashSession, server: MessagesServer, config: AgentConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    monkeypatch.setenv("REMOTE_BASH_MODEL", "claude-haiku-4-5")
    server.add(Reply([text("hi")]))
    outcome = await run_agent("hello", session, AgentConfig(transcript=config.transcript))
    assert outcome.stop_reason == "end_turn"
    assert server.requests[0]["model"] == "claude-haiku-4-5"
    assert "from-env" in server.headers[0].get("x-api-key", server.headers[0].get("authorization", ""))


async def test_missing_credentials_and_empty_task(
    session: RemoteBashSession, config: AgentConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-config"))
    with pytest.raises(AgentError, match="ANTHROPIC_API_KEY"):
        await run_agent("hello", session, config)
    with pytest.raises(AgentError, match="task is empty"):
        await run_agent("  ", session, config)


def test_config_forbids_unknown_fields() -> None:
    with pytest.raises(ValueError, match="max_turn"):
        AgentConfig(max_turn=3)  # type: ignore[call-arg]
    assert AgentConfig().max_turns == 50


# -- interruption and resume -----------------------------------------------------------------


async def test_interrupt_kills_the_command_and_resume_reports_it(
    hosts: TestHosts, session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic,
    config: AgentConfig, home: Path, mark: str,
) -> None:
    # "&&": with ";" the rest of the command would run after the kill (the bug of the timeout test).
    slow = tool_use({"command": f"touch ~/{mark}.started; bash -c 'sleep 30; : {mark}'\n"
                                f"[ $? = 0 ] && touch ~/{mark}.after"})
    server.add(Reply([tool_use({"command": "echo before"}), slow]))
    task = asyncio.create_task(run_agent("work", session, config, client=client))
    await wait_for((home / f"{mark}.started").exists, within=10, what="the slow command to start")
    task.cancel()
    outcome = await task
    assert outcome.stop_reason == "interrupted"
    assert "interrupted" in outcome.message
    assert processes_with(mark, hosts.user) == []
    assert not (home / f"{mark}.after").exists()
    records = lines(outcome.transcript)
    assert records[-1]["type"] == "stop"
    assert records[-1]["stop_reason"] == "interrupted"
    assert records[-2] == {**records[-2], "type": "command", "tool_use_id": slow["id"], "interrupted": True}

    def check(body: dict[str, Any]) -> Reply:
        first, second = body["messages"][-1]["content"]
        assert first["content"] == "before\n"
        assert first["is_error"] is False
        assert second["tool_use_id"] == slow["id"]
        assert second["is_error"] is True
        assert "interrupted while this command ran" in second["content"]
        assert "unknown" in second["content"]
        return Reply([text("resumed")])

    server.add(check)
    resumed, _ = await run("", session, config, client, resume=outcome.transcript)
    assert resumed.stop_reason == "end_turn"
    assert resumed.final_text == "resumed"
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["user", "assistant", "user"]
    assert not (home / f"{mark}.after").exists()
    recovered = [r for r in lines(outcome.transcript) if r["type"] == "tool_results"]
    assert recovered[-1]["recovered"] is True


async def test_resume_never_reruns_a_command(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
    tmp_path: Path, home: Path, mark: str,
) -> None:
    first = tool_use({"command": f"echo ran >> ~/{mark}"})
    second = tool_use({"command": f"echo ran2 >> ~/{mark}"})
    server.add(Reply([first, second]), Reply([text("done")]))
    outcome, _ = await run("append", session, config, client)
    assert (home / mark).read_text() == "ran\nran2\n"
    records = outcome.transcript.read_text().splitlines(keepends=True)
    kinds = [json.loads(r)["type"] for r in records]
    # A crash after the first command was recorded, halfway through writing the next line.
    crashed = tmp_path / "crashed.jsonl"
    cut = kinds.index("command") + 1
    crashed.write_text("".join(records[:cut]) + records[cut][:25])

    def check(body: dict[str, Any]) -> Reply:
        recorded, unknown = body["messages"][-1]["content"]
        assert recorded == {"type": "tool_result", "tool_use_id": first["id"], "content": "(no output)",
                            "is_error": False}
        assert unknown["tool_use_id"] == second["id"]
        assert unknown["is_error"] is True
        assert "may not have run, or may have run in part" in unknown["content"]
        return Reply([text("ok")])

    server.add(check)
    resumed, _ = await run("", session, AgentConfig(model=MODEL, transcript=tmp_path / "new.jsonl"), client,
                           resume=crashed)
    assert resumed.stop_reason == "end_turn"
    assert resumed.transcript == tmp_path / "new.jsonl"
    assert (home / mark).read_text() == "ran\nran2\n"


async def test_resume_a_finished_run_with_a_new_instruction(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, config: AgentConfig,
) -> None:
    use = tool_use({"command": "echo one"})
    server.add(Reply([use]), Reply([text("first part done")]))
    outcome, _ = await run("part one", session, config, client)
    server.add(Reply([text("second part done")]))
    resumed, _ = await run("now part two", session, config, client, resume=outcome.transcript)
    assert resumed.final_text == "second part done"
    assert resumed.turns == 1
    messages = server.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == "part one"
    assert messages[1]["content"] == [use]
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": use["id"], "content": "one\n",
                                       "is_error": False}]
    assert messages[3]["content"] == [{"type": "text", "text": "first part done"}]
    assert messages[4]["content"] == [{"type": "text", "text": "now part two",
                                       "cache_control": {"type": "ephemeral"}}]


async def test_resume_refuses_another_host_or_a_foreign_file(
    session: RemoteBashSession, client: anthropic.AsyncAnthropic, config: AgentConfig, tmp_path: Path,
) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"type": "meta", "task": "x", "host": "db-9"}) + "\n")
    with pytest.raises(AgentError, match="host 'db-9', not 'web-1'"):
        await run_agent("", session, config, client=client, resume=other)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"hello": 1}\n')
    with pytest.raises(AgentError, match="no meta line"):
        await run_agent("", session, config, client=client, resume=foreign)


# -- the SDK's tool runner -------------------------------------------------------------------


async def test_bash_tool_in_the_sdk_tool_runner(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic, home: Path,
    mark: str,
) -> None:
    ok = tool_use({"command": f"echo runner > ~/{mark}; cat ~/{mark}"})
    bad = tool_use({"command": "exit_status_seven() { return 7; }; exit_status_seven"})
    server.add(Reply([ok, bad]), Reply([text("done")]))
    runner = client.beta.messages.tool_runner(
        model=MODEL, max_tokens=1024, tools=[BashTool(session)], thread=False,
        messages=[{"role": "user", "content": "write a file"}],
    )
    replies = [message async for message in runner]
    assert replies[-1].content[0].type == "text"
    assert server.requests[0]["tools"] == [{"type": "bash_20250124", "name": "bash"}]
    assert server.paths[0].startswith("/v1/messages")
    good, failed = server.tool_results(1)
    assert good == {"type": "tool_result", "tool_use_id": ok["id"], "content": "runner\n"}
    assert failed["tool_use_id"] == bad["id"]
    assert failed["is_error"] is True
    assert failed["content"] == "Exit status 7"
    assert (home / mark).read_text() == "runner\n"


async def test_a_failing_commands_whole_output_reaches_claude_through_the_runner(
    session: RemoteBashSession, server: MessagesServer, client: anthropic.AsyncAnthropic,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # More than the 4 KiB to which the runner cuts the repr of any exception but its ToolError.
    failing = tool_use({"command": "for i in $(seq 1 400); do echo \"error line $i of a failing build\" >&2; done; "
                                   "(exit 2)"})
    server.add(Reply([failing]), Reply([text("it failed")]))
    runner = client.beta.messages.tool_runner(
        model=MODEL, max_tokens=1024, tools=[BashTool(session)], thread=False,
        messages=[{"role": "user", "content": "build it"}],
    )
    with caplog.at_level("WARNING", logger="anthropic"):
        replies = [message async for message in runner]
    assert replies[-1].content[0].type == "text"
    expected = "".join(f"error line {i} of a failing build\n" for i in range(1, 401)) + "Exit status 2"
    assert len(expected) > 3 * 4096
    (failed,) = server.tool_results(1)
    assert failed == {"type": "tool_result", "tool_use_id": failing["id"], "content": expected, "is_error": True}
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # no traceback logged
