"""Garbage arguments (issue #5, "Bad arguments"): the defined leniency or a clear tool error, never a
traceback, and never a path outside the sessions directory opened.

Every argument of both tools gets values of every wrong type, through the SDK's stdio client against
the installed server, and must be answered as tests/reference.py answers it. Messages the SDK cannot
take as a tools/call (arguments that are not an object, unparseable JSON) are sent raw.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reference
from conftest import CCWEB_INDEX, Corpus, StdioClient, session, stdio_client_for
from faults import OpenWatch, clean_env
from test_contract import same_answer

SOURCE = "orch"
INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"
MEGA = 1_000_000

WRONG_TYPES: list[Any] = [
    None, True, False, {}, {"conversationId": "orch"}, [], ["orch"], [5],
    0, -0.0, 0.0, -1, 7, 2.5, 1e308, -1e308, 5e-324, 10**30, -(10**30), 10**400, 2**63, -(2**63),
]  # fmt: skip
HOSTILE_STRINGS: list[str] = [
    "", " ", "\n", "orch\n", "\norch", "orch\x00", "\x00", "or\x00ch", "orch\r\n", "\t",
    "..", ".", "../orch", "../outside", "../../etc/passwd", "/etc/passwd", "/orch", "orch/", "a/b", "a\\b",
    "sub/../orch", "orch.json", "orch/.", "~", "$HOME", "%2e%2e%2forch", "*", "orch*", "o?ch",
    "日本語", "ｏｒｃｈ", "orch\u200b", "orch\u0301", "😀", "\ud800".encode("utf-16", "surrogatepass").decode("utf-16", "replace"),
    "x" * 128, "x" * 129, "x" * MEGA, "日" * (MEGA // 3), "a\x00" * (MEGA // 2), "children\x00", "CHILDREN", "children ",
    "all", "idle", "IDLE", "claude",
]  # fmt: skip
VALUES = WRONG_TYPES + HOSTILE_STRINGS

TOOL_ARGUMENTS = {
    INPUTS: ["conversationId", "limit", "maxChars"],
    CONVERSATIONS: ["agent", "status", "limit", "scope"],
}


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else f"{text[:40]}... ({len(text)} chars)"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StdioClient, Corpus, Path, OpenWatch]]:
    root = tmp_path_factory.mktemp("arguments")
    corpus = Corpus(root / "sessions")
    corpus.write(SOURCE, session("plan", "ship it", updated="2026-11-20T00:00:00Z"))
    corpus.write("kid", session("part", updated="2026-11-21T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": SOURCE}))
    corpus.write("codex1", session("other", agent="codex", updated="2026-11-22T00:00:00Z", status="Running"))
    (corpus.path / "sub").mkdir()
    (corpus.path / "sub" / "nested.json").write_text(json.dumps(session("nested")))
    # Valid sessions outside the sessions directory, where a path trick would lead.
    (root / "outside.json").write_text(json.dumps(session("outside the directory")))
    (root / "orch.json").write_text(json.dumps(session("a decoy")))
    db_dir = tmp_path_factory.mktemp("arguments-db")
    with OpenWatch(root, corpus.path / "sub") as opens:
        with stdio_client_for(corpus.path, db_dir / "index.sqlite", source=SOURCE) as client:
            yield client, corpus, root, opens


def test_every_argument_of_list_user_inputs(setup: tuple[StdioClient, Corpus, Path, OpenWatch]) -> None:
    client, corpus, _, _ = setup
    for name in TOOL_ARGUMENTS[INPUTS]:
        for value in VALUES:
            for base in ({}, {"conversationId": "kid"}) if name != "conversationId" else ({},):
                arguments = {**base, name: value}
                try:
                    same_answer(client.call(INPUTS, arguments), reference.list_user_inputs(corpus.path, arguments, SOURCE))
                except AssertionError as exc:
                    raise AssertionError(f"{name}={short(value)}: {exc}") from None


def test_every_argument_of_list_conversations(setup: tuple[StdioClient, Corpus, Path, OpenWatch]) -> None:
    client, corpus, _, _ = setup
    for name in TOOL_ARGUMENTS[CONVERSATIONS]:
        for value in VALUES:
            for base in ({}, {"scope": "children"}):
                arguments = {**base, name: value}
                try:
                    same_answer(client.call(CONVERSATIONS, arguments), reference.list_conversations(corpus.path, arguments, SOURCE))
                except AssertionError as exc:
                    raise AssertionError(f"{name}={short(value)}: {exc}") from None


def test_extra_and_odd_argument_names_are_ignored(setup: tuple[StdioClient, Corpus, Path, OpenWatch]) -> None:
    client, corpus, _, _ = setup
    odd = {"": 1, "\x00": "x", "conversationid": "kid", "LIMIT": 1, "x" * 10_000: True, "__proto__": {"limit": 1}}
    for tool, oracle in ((INPUTS, reference.list_user_inputs), (CONVERSATIONS, reference.list_conversations)):
        same_answer(client.call(tool, odd), oracle(corpus.path, odd, SOURCE))


def test_unknown_tool_names(setup: tuple[StdioClient, Corpus, Path, OpenWatch]) -> None:
    client, _, _, _ = setup
    for name in ("", "ccweb_list_user_inputs ", "CCWEB_LIST_USER_INPUTS", "../ccweb_list_user_inputs", "x\x00y", "x" * MEGA):
        payload, is_error = client.call(name, {})
        assert is_error and payload["error"]["code"] == "unknown_tool", short(name)
        assert len(payload["error"]["message"]) < 500, "the name is not echoed back whole"


def test_no_path_outside_the_sessions_directory_is_opened(setup: tuple[StdioClient, Corpus, Path, OpenWatch]) -> None:
    """Runs after the others in this module: everything they sent is accounted for."""
    client, _, _, opens = setup
    for value in ("../outside", "../orch", "..", "/etc/passwd", "sub/nested", "sub/../orch"):
        payload, is_error = client.call(INPUTS, {"conversationId": value})
        assert is_error and payload["error"]["code"] == "invalid_conversation_id"
    touched = opens.files_touched()
    assert touched == set(), f"opened outside the sessions directory: {touched}"


# --- below the SDK's client: arguments that are not an object, unparseable requests --------------


class RawServer:
    """`ccweb-index serve` driven with hand-written JSON-RPC lines."""

    def __init__(self, sessions: Path, db: Path, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [CCWEB_INDEX, "serve", "--sessions-dir", str(sessions), "--db", str(db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "wb"),
            env=clean_env(CCWEB_SOURCE_SESSION_ID=SOURCE),
        )  # fmt: skip
        self._buffer = b""
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})  # fmt: skip
        assert self.receive(30)["result"]["serverInfo"]["name"] == "ccweb-index"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: Any) -> None:
        line = message if isinstance(message, str) else json.dumps(message)
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def call(self, request_id: int, params: Any) -> dict[str, Any] | None:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        return self.receive(30)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(30)


def test_arguments_that_are_not_an_object(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    corpus.write(SOURCE, session("plan"))
    server = RawServer(corpus.path, tmp_path / "db.sqlite", tmp_path / "log")
    try:
        # The SDK refuses these before they reach the tool: a JSON-RPC "invalid params" error.
        for n, params in enumerate([
            {"name": INPUTS, "arguments": [1, 2]}, {"name": INPUTS, "arguments": "limit=1"},
            {"name": INPUTS, "arguments": 5}, {"name": INPUTS, "arguments": True}, {"name": 5},
            {"name": None}, {},
        ], 1):  # fmt: skip
            response = server.call(n, params)
            assert response is not None and response["id"] == n, params
            assert response.get("error", {}).get("code") == -32602, (params, response)
        # Null arguments are no arguments.
        response = server.call(20, {"name": INPUTS, "arguments": None})
        assert response is not None and response["result"]["isError"] is False
        assert response["result"]["structuredContent"]["conversationId"] == SOURCE
        # Lines the SDK's transport cannot take as a request: they are answered with the error HTTP
        # gives them, when their request id can be read (server/unparsed.py); the rest (nesting beyond
        # any parser's limit, broken JSON) are dropped. The server stays up and answers what follows.
        for n, params in enumerate(([INPUTS], "x", 7, None), 40):
            server.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
        for n, limit in ((30, "9" * 5000), (31, "[" * 100_000 + "]" * 100_000), (34, "[" * 300 + "]" * 300)):
            server.send(f'{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{INPUTS}","arguments":{{"limit":{limit}}}}}}}')
        server.send('{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{')
        # A lone surrogate (json.dumps escapes it), with the id after the params as JavaScript's client puts it.
        server.send({"params": {"name": INPUTS, "arguments": {"conversationId": "ab\ud800"}}, "jsonrpc": "2.0", "id": "s-35", "method": "tools/call"})
        server.send({"jsonrpc": "2.0", "id": 33, "method": "tools/call", "params": {"name": INPUTS, "arguments": {"limit": 1}}})
        refused = {}
        while (response := server.receive(30)) is not None and response.get("id") != 33:
            refused[response["id"]] = response["error"]["code"]
        assert refused == {40: -32600, 41: -32600, 42: -32600, 43: -32602, 30: -32700, 34: -32700, "s-35": -32700}
        assert response is not None and response["result"]["isError"] is False
        assert server.proc.poll() is None
    finally:
        assert server.close() == 0
    assert "Traceback" not in (tmp_path / "log").read_text(errors="replace")


def test_an_unforeseen_failure_is_a_tool_error_not_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    from ccweb_index.server.app import guarded_call

    class Broken:
        def call(self, *args: Any) -> Any:
            raise RuntimeError("a bug")

    result = guarded_call(Broken(), INPUTS, {}, None)  # type: ignore[arg-type]
    assert result.is_error and result.payload["error"]["code"] == "internal_error"
    assert "a bug" not in result.payload["error"]["message"]
    assert any("failed unexpectedly" in r.getMessage() for r in caplog.records)
