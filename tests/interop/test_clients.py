"""Real MCP clients against `ccweb-index serve`: the TypeScript SDK client 1.x and the Python SDK
client, 2.x and the last 1.x.

Each client runs in its own process (tests/interop/drive.py) and is used the way an agent's host uses
it: `initialize`, `tools/list` first, then every success and every error of both tools, answered as
tests/reference.py (written from the specification alone) says. Over stdio and over the stateless
Streamable HTTP server, where a restart of the server in the middle of a session must cost the client
nothing.

The TypeScript client checks each `structuredContent` against the tool's `outputSchema` (even on
errors, typescript-sdk#1943): that an error reaches it as an error, with its code and message, and
not as a schema violation, is the point of running it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from drive import Client, python_sdk1, ts_sdk_version
from test_http import SOURCE_HEADER, TOKEN, HttpServer, start_http_server, stop

import reference
from conftest import Corpus, answer_of, client_launch, session
from test_contract import same_answer

INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"
WAIT = "ccweb_wait_for_conversations"
SOURCE = "orch"
# (client, protocol version spoken without a handshake, or None for the `initialize` handshake).
# "2026-07-28" is the sessionless revision Claude Code speaks; the SDK's `Client` speaks it too.
CLIENTS = [("typescript", None), ("python", None), ("python", "2026-07-28"), ("python-sdk1", None)]

# (tool, arguments) for a client that runs in SOURCE; every success and error shape of both tools.
WITH_SOURCE: list[tuple[str, dict[str, Any]]] = [
    (INPUTS, {}),
    (INPUTS, {"conversationId": "c1", "limit": 1, "maxChars": 3}),  # cut to the budget: truncated
    (INPUTS, {"limit": 999, "maxChars": 0}),  # clamped
    (INPUTS, {"conversationId": "not an id!"}),  # invalid_conversation_id
    (INPUTS, {"conversationId": "ghost"}),  # conversation_not_found
    (INPUTS, {"conversationId": "broken"}),  # conversation_unreadable
    (CONVERSATIONS, {}),
    (CONVERSATIONS, {"scope": "children"}),
    (CONVERSATIONS, {"agent": "CODEX", "limit": 1}),
    (CONVERSATIONS, {"status": "no such status"}),
    (WAIT, {"scope": "children", "timeoutSeconds": 0}),  # the list shape, changed, timedOut, a changeToken
    (WAIT, {"agent": "codex", "timeoutSeconds": 0.2}),
    (WAIT, {"since": "not a token!"}),  # invalid_change_token
    (CONVERSATIONS, {"scope": "descendants"}),  # depth in every row
    (CONVERSATIONS, {"conversationIds": ["c1", "g1", "ghost"], "scope": "descendants", "limit": 1}),
    (CONVERSATIONS, {"conversationIds": ["c1", "no/such id"]}),  # invalid_conversation_id
    (CONVERSATIONS, {"conversationIds": [f"w{n}" for n in range(101)]}),  # too_many_conversation_ids
    (CONVERSATIONS, {"scope": "children", "cursor": "not-a-cursor"}),  # invalid_cursor
    (INPUTS, {"cursor": "bm90IGEgY3Vyc29y"}),  # invalid_cursor
    (WAIT, {"scope": "descendants", "conversationIds": ["g1", "ghost"], "timeoutSeconds": 0}),
    (WAIT, {"conversationIds": ["c1", "no/such id"]}),  # invalid_conversation_id
]
# Followed to the end by their nextCursor, each page checked by the client against the outputSchema.
PAGED: list[tuple[str, dict[str, Any]]] = [
    (INPUTS, {"limit": 1, "maxChars": 4}),
    (CONVERSATIONS, {"limit": 2}),
    (CONVERSATIONS, {"scope": "descendants", "limit": 1}),
]
# ... and for a client that was not told its conversation: sourceConversationId is null.
WITHOUT_SOURCE: list[tuple[str, dict[str, Any]]] = [
    (INPUTS, {}),  # missing_source_conversation
    (CONVERSATIONS, {"scope": "children"}),  # missing_source_conversation
    (CONVERSATIONS, {"limit": 2}),
    (WAIT, {"scope": "children"}),  # missing_source_conversation
    (WAIT, {"limit": 2, "timeoutSeconds": 0}),
]
ERROR_CODES = {
    "invalid_conversation_id", "conversation_not_found", "conversation_unreadable", "missing_source_conversation",
    "invalid_change_token", "invalid_cursor", "too_many_conversation_ids",
}  # fmt: skip
ORACLES = {INPUTS: reference.list_user_inputs, CONVERSATIONS: reference.list_conversations, WAIT: reference.wait_for_conversations}


def write_corpus(corpus: Corpus) -> None:
    child = {"kind": "mcp", "sourceSessionId": SOURCE}
    corpus.write(SOURCE, session("plan the release", "now ship it ✅", updated="2026-11-20T00:00:00Z"))
    corpus.write("c1", session("write the notes", updated="2026-11-22T00:00:00Z", created_from=child))
    corpus.write("c2", session("fix 测试", agent="codex", updated="2026-11-23T00:00:00Z", created_from=child))
    corpus.write("g1", session("a worker's worker", updated="2026-11-21T00:00:00Z", created_from={"kind": "mcp", "sourceSessionId": "c1"}))
    corpus.write("fork", session("try B", updated="2026-11-24T00:00:00Z", created_from={"kind": "branch", "sourceSessionId": SOURCE}))
    corpus.write("broken", b'{"messages": [')


def expected(corpus: Corpus, tool: str, arguments: dict[str, Any], source: str | None) -> tuple[dict[str, Any], bool]:
    return ORACLES[tool](str(corpus.path), arguments, source)


def check(
    client: Client, corpus: Corpus, tool: str, arguments: dict[str, Any], source: str | None,
    reference_arguments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One call through the client: it must reach the caller as the reference says, error or not.
    `reference_arguments`: the reference's, when they differ (its own cursor)."""
    answer = client.send({"op": "call", "name": tool, "arguments": arguments})
    assert answer["ok"], f"the {client.name} client lost this answer: {tool} {arguments}: {answer['error']}"
    result = types.CallToolResult.model_validate(answer["result"])
    problem, payload = answer_of(result)
    assert problem is None, f"{client.name}, {tool} {arguments}: {problem}"
    same_answer((payload, bool(result.is_error)), expected(corpus, tool, reference_arguments or arguments, source))
    return payload


def check_tools(client: Client) -> None:
    tools = {tool["name"]: tool for tool in client.ok({"op": "list"})["tools"]}
    assert set(tools) == {INPUTS, CONVERSATIONS, WAIT}
    for tool in tools.values():
        assert tool["annotations"]["readOnlyHint"] is True
        assert tool["outputSchema"]["type"] == "object"


def check_token_round_trip(client: Client, corpus: Corpus) -> None:
    """A list's changeToken, given back as since: the wait (checked by the client against its output
    schema) reports nothing changed and hands back the same token."""
    listed = check(client, corpus, CONVERSATIONS, {"scope": "children"}, SOURCE)
    answer = client.ok({"op": "call", "name": WAIT, "arguments": {"scope": "children", "since": listed["changeToken"], "timeoutSeconds": 0.2}})
    waited = answer["result"]["structuredContent"]
    assert waited["timedOut"] is True and waited["changed"] == [] and waited["changeToken"] == listed["changeToken"]


def run_cases(client: Client, corpus: Corpus, cases: list[tuple[str, dict[str, Any]]], source: str | None) -> set[str]:
    codes = set()
    for tool, arguments in cases:
        payload = check(client, corpus, tool, arguments, source)
        if "error" in payload:
            codes.add(payload["error"]["code"])
    if source is not None:
        for tool, arguments in PAGED:
            run_pages(client, corpus, tool, arguments, source)
    return codes


def run_pages(client: Client, corpus: Corpus, tool: str, arguments: dict[str, Any], source: str) -> None:
    """Page to the end through the client; the reference follows its own cursors alongside."""
    oracle = ORACLES[tool]
    ours, theirs = dict(arguments), dict(arguments)
    for _ in range(20):
        payload = check(client, corpus, tool, ours, source, theirs)
        if payload["nextCursor"] is None:
            return
        ours["cursor"] = payload["nextCursor"]
        theirs["cursor"] = oracle(str(corpus.path), theirs, source)[0]["nextCursor"]
    raise AssertionError(f"{tool} {arguments}: the pages never ended")


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    corpus = Corpus(tmp_path / "sessions")
    write_corpus(corpus)
    return corpus


@pytest.fixture(scope="module", params=CLIENTS, ids=lambda p: "-".join(filter(None, p)))
def client_process(request: pytest.FixtureRequest) -> Iterator[Client]:
    """One client process for the module's tests (starting one costs about a second of CPU): each
    test connects it afresh, and leaves it closed."""
    client = Client.start(*request.param)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def client(client_process: Client) -> Iterator[Client]:
    assert client_process.proc.poll() is None, f"the {client_process.name} client exited in an earlier test"
    try:
        yield client_process
    finally:
        client_process.send({"op": "close"})  # the connection this test left open, if any


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, Corpus]]:
    """A server that tests only read from (and are refused by)."""
    root = tmp_path_factory.mktemp("clients-shared")
    corpus = Corpus(root / "sessions")
    write_corpus(corpus)
    server = start_http_server(corpus.path, root / "index.sqlite", root / "server.log", token=TOKEN)
    try:
        yield server, corpus
    finally:
        stop(server)


def stdio_command(corpus: Corpus, db: Path, source: str | None, mode: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    if source is not None:
        env["CCWEB_SOURCE_SESSION_ID"] = source
    command, *args = client_launch("serve", "--sessions-dir", str(corpus.path), "--db", str(db))
    return {"op": "connect", "transport": "stdio", "command": command, "args": args, "env": env, "mode": mode}


def http_command(server: HttpServer, source: str | None, mode: str | None, token: str | None = TOKEN) -> dict[str, Any]:
    headers = {} if source is None else {SOURCE_HEADER: source}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return {"op": "connect", "transport": "http", "url": server.url, "headers": headers, "mode": mode}


def test_the_typescript_client_is_the_pinned_1x() -> None:
    lock = json.loads((Path(__file__).parent / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/@modelcontextprotocol/sdk"]["version"]
    assert pinned.startswith("1.") and ts_sdk_version() == pinned, "run `npm ci --prefix tests/interop`"


def test_the_python_sdk1_client_is_the_pinned_1x() -> None:
    pinned = (Path(__file__).parent / "python-sdk-1.txt").read_text().split("mcp==")[1].split()[0]
    version = subprocess.run([python_sdk1(), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    assert pinned.startswith("1.") and version == pinned, "remake tests/interop/.venv from python-sdk-1.txt"


def test_stdio(client: Client, corpus: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    client.ok(stdio_command(corpus, db, SOURCE, client.mode))
    check_tools(client)
    codes = run_cases(client, corpus, WITH_SOURCE, SOURCE)
    check_token_round_trip(client, corpus)
    client.ok({"op": "close"})
    client.ok(stdio_command(corpus, db, None, client.mode))
    check_tools(client)
    codes |= run_cases(client, corpus, WITHOUT_SOURCE, None)
    assert codes == ERROR_CODES


def test_an_answer_too_large_for_a_client_is_a_tool_error(client: Client, corpus: Corpus, tmp_path: Path) -> None:
    """A title of control characters, each escaped twice on the wire, makes a list answer a message
    beyond the TypeScript client's stdio buffer, which then drops the connection and every later
    call. It is the tool error answer_too_large instead, and the connection goes on."""
    corpus.write("huge", session("a long title", title="\x01" * (11 * 2**20 // 13), updated="2026-11-01T00:00:00Z"))
    client.ok(stdio_command(corpus, tmp_path / "index.sqlite", SOURCE, client.mode))
    answer = client.ok({"op": "call", "name": CONVERSATIONS, "arguments": {}})
    result = types.CallToolResult.model_validate(answer["result"])
    problem, payload = answer_of(result)
    assert problem is None and result.is_error and payload["error"]["code"] == "answer_too_large", payload
    assert "smaller limit" in payload["error"]["message"]
    check(client, corpus, CONVERSATIONS, {"limit": 1}, SOURCE)  # the huge one is the oldest


def test_http_and_a_restart_mid_session(client: Client, corpus: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    server = start_http_server(corpus.path, db, tmp_path / "server.log", token=TOKEN)
    try:
        client.ok(http_command(server, SOURCE, client.mode))
        check_tools(client)
        codes = run_cases(client, corpus, WITH_SOURCE, SOURCE)
        # A restart in the middle of the session: same port, same client, no new initialize.
        assert stop(server) == 0
        server = start_http_server(corpus.path, db, tmp_path / "server2.log", token=TOKEN, args=("--port", str(server.port)))
        check_tools(client)
        codes |= run_cases(client, corpus, WITH_SOURCE, SOURCE)
        check_token_round_trip(client, corpus)
        client.ok({"op": "close"})
        client.ok(http_command(server, None, client.mode))
        codes |= run_cases(client, corpus, WITHOUT_SOURCE, None)
    finally:
        stop(server)
    assert codes == ERROR_CODES
    assert "Traceback" not in server.stderr()


def test_http_without_the_token_names_it(client: Client, shared_server: tuple[HttpServer, Corpus]) -> None:
    """What the client shows its user when the token is missing or wrong: where to configure it."""
    server, _ = shared_server
    if client.name == "python-sdk1":
        pytest.skip("the Python SDK 1.x shows only `401 Unauthorized`, not the body that says where the token is")
    for token in (None, "not-the-token"):
        answer = client.send(http_command(server, SOURCE, client.mode, token))
        if answer["ok"]:  # a client that pins its protocol version sends nothing until the first request
            answer = client.send({"op": "list"})
        assert not answer["ok"], answer
        message = answer["error"]["message"]
        print(f"{client.name} client, token {token!r}: {answer['error']['name']}: {message}")
        assert "CCWEB_INDEX_TOKEN" in message and "--token-file" in message, message
        client.send({"op": "close"})


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_lone_surrogate_in_the_arguments_is_refused_at_once(transport: str, corpus: Corpus, tmp_path: Path) -> None:
    """Half an emoji cut by JavaScript's `slice` is a lone surrogate, which `JSON.stringify` writes as
    an escape the SDK's parser refuses. Over stdio the SDK dropped such a request, and the client
    waited for its time-out; now both transports answer with the parse error (server/unparsed.py),
    and the connection goes on."""
    client = Client.start("typescript")
    server = start_http_server(corpus.path, tmp_path / "index.sqlite", tmp_path / "server.log", token=TOKEN) if transport == "http" else None
    try:
        client.ok(stdio_command(corpus, tmp_path / "index.sqlite", SOURCE, None) if server is None else http_command(server, SOURCE, None))
        for arguments in ({"conversationId": "ab\ud800"}, {"agent": "\udc00x"}):
            tool = INPUTS if "conversationId" in arguments else CONVERSATIONS
            answer = client.send({"op": "call", "name": tool, "arguments": arguments})
            assert not answer["ok"] and "-32700" in answer["error"]["message"] + str(answer["error"]["code"]), answer
            assert "surrogate" in answer["error"]["message"], answer
        check(client, corpus, CONVERSATIONS, {"scope": "children"}, SOURCE)
    finally:
        client.close()
        if server is not None:
            stop(server)


def test_a_wait_given_up_then_the_session_closed_cleanly(client: Client, corpus: Corpus, tmp_path: Path) -> None:
    """An orchestrator gives up a wait (its own time-out, a cancel scope) and ends its stdio session.
    The SDK answered the wait "Connection closed" after the client had closed stdin, and the Python
    SDK 1.x client's exit failed on that line with BrokenResourceError (found by an independent test;
    server.stop.SilentAfterHangUp). Then the next session works."""
    db = tmp_path / "index.sqlite"
    client.ok(stdio_command(corpus, db, SOURCE, client.mode))
    wait = {"op": "call", "name": WAIT, "arguments": {"scope": "children", "timeoutSeconds": 30}, "abandonAfter": 0.5}
    assert client.ok(wait).get("abandoned"), "the wait answered before it was given up"
    closed = client.ok({"op": "close"})
    assert "closeError" not in closed, closed["closeError"]
    client.ok(stdio_command(corpus, db, SOURCE, client.mode))
    check(client, corpus, CONVERSATIONS, {"scope": "children"}, SOURCE)
