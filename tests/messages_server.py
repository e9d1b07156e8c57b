"""A scripted Messages endpoint: a real HTTP server on 127.0.0.1 that replays a script.

The real anthropic SDK is pointed at it (``base_url=server.url``), so the tests exercise the
SDK's own request building, retries, JSON and Server-Sent-Events parsing. Each POST to
``/v1/messages`` takes the next step of the script:

* a :class:`Reply` (content blocks, stop_reason, usage), sent as JSON, or as the real
  streaming event sequence when the request has ``"stream": true``;
* a :class:`Fail` (status code, JSON error body, headers such as ``retry-after``);
* a :class:`StreamFail`: a stream that starts, then carries an ``error`` event;
* a callable that receives the parsed request body and returns one of the above, so a step
  can answer from the tool_results it was sent.

Every request body (parsed JSON) and its headers are recorded for the assertions.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Fail", "MessagesServer", "Reply", "StreamFail", "text", "tool_use"]

_ids = itertools.count(1)


def text(value: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": value}


def tool_use(input: Any, *, id: str | None = None, name: str = "bash") -> dict[str, Any]:
    """A tool_use content block (a fresh id unless given)."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": input}


@dataclass
class Reply:
    """One assistant message."""

    content: list[dict[str, Any]]
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 100, "output_tokens": 20})

    def __post_init__(self) -> None:
        if self.stop_reason is None:
            uses_tool = any(block["type"] == "tool_use" for block in self.content)
            self.stop_reason = "tool_use" if uses_tool else "end_turn"


@dataclass
class Fail:
    """An HTTP error answer, shaped like the API's."""

    status: int
    error_type: str = "api_error"
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamFail:
    """A 200 stream that begins, then carries an ``error`` event (as an overloaded stream does)."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"


Step = Reply | Fail | StreamFail | Callable[[dict[str, Any]], "Reply | Fail | StreamFail"]


class MessagesServer:
    """The endpoint; use as a context manager, or ``start()``/``stop()``."""

    def __init__(self, script: Iterable[Step] = (), *, model: str = "claude-test") -> None:
        self.script: list[Step] = list(script)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="messages-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, *steps: Step) -> None:
        with self._lock:
            self.script.extend(steps)

    def start(self) -> MessagesServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tool_results(self, index: int = -1) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message of request ``index``."""
        last = self.requests[index]["messages"][-1]
        assert last["role"] == "user", last
        content = last["content"]
        return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]

    # -- serving ---------------------------------------------------------------------

    def _next(self, body: dict[str, Any]) -> Reply | Fail | StreamFail:
        with self._lock:
            self.requests.append(body)
            if not self.script:
                self.problems.append(f"request {len(self.requests)} came after the end of the script")
                return Fail(500, "api_error", "the test script has no more steps",
                            {"x-should-retry": "false"})
            step = self.script.pop(0)
        if isinstance(step, Reply | Fail | StreamFail):
            return step
        return step(body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    self._send_json(404, _error("not_found_error", f"no route {self.path}"))
                    return
                body = json.loads(raw)
                with server._lock:
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.paths.append(self.path)
                step = server._next(body)
                if isinstance(step, Fail):
                    self._send_json(step.status, _error(step.error_type, step.message), step.headers)
                elif isinstance(step, StreamFail):
                    events = [("message_start", {"type": "message_start", "message": server._message(
                        Reply([], "end_turn"), empty=True)})]
                    events.append(("error", _error(step.error_type, step.message)))
                    self._send_sse(events)
                elif body.get("stream"):
                    self._send_sse(server._stream_events(step))
                else:
                    self._send_json(200, server._message(step))

            def _send_json(self, status: int, payload: dict[str, Any],
                           headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{next(_ids):06d}")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _send_sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
                data = "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n"
                               for name, payload in events).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _message(self, reply: Reply, *, empty: bool = False) -> dict[str, Any]:
        usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0, **reply.usage}
        return {
            "id": f"msg_{next(_ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [] if empty else reply.content,
            "stop_reason": None if empty else reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def _stream_events(self, reply: Reply) -> list[tuple[str, dict[str, Any]]]:
        start = self._message(reply, empty=True)
        start["usage"] = {**start["usage"], "output_tokens": 1}
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(reply.content):
            if block["type"] == "text":
                events.append(_block_start(index, {"type": "text", "text": ""}))
                value = block["text"]
                for chunk in _chunks(value, 7) or [""]:
                    events.append(_delta(index, {"type": "text_delta", "text": chunk}))
            elif block["type"] == "tool_use":
                events.append(_block_start(index, {**block, "input": {}}))
                for chunk in _chunks(json.dumps(block["input"]), 9):
                    events.append(_delta(index, {"type": "input_json_delta", "partial_json": chunk}))
            else:
                events.append(_block_start(index, block))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": reply.usage.get("output_tokens", 0)},
        }))
        events.append(("message_stop", {"type": "message_stop"}))
        return events


def _error(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _chunks(value: str, size: int) -> list[str]:
    return [value[i:i + size] for i in range(0, len(value), size)]
