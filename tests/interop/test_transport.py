"""The stateless Streamable HTTP transport on the wire: what any client, SDK or not, can count on.

No session id is issued or required; GET and DELETE answer 405 (no notification stream, no session to
end); a `tools/call` is answered on its own SSE stream when the client accepts one, in JSON otherwise;
the Host check and the token apply to every request, whatever its method.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from test_http import SOURCE_HEADER, TOKEN, HttpServer, http_server

from ccweb_index.server.tools import TOOLS

from conftest import Corpus, session

AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOTH = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
JSON_ONLY = {"Accept": "application/json", "Content-Type": "application/json"}
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ccweb_list_user_inputs", "arguments": {}}}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("transport")
    corpus = Corpus(root / "sessions")
    corpus.write("orch", session("hello"))
    with http_server(corpus.path, root / "index.sqlite", root / "server.log", token=TOKEN) as server:
        yield server


def post(server: HttpServer, body: Any, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(server.url, json=body, headers={**AUTH, SOURCE_HEADER: "orch", **headers}, timeout=30)


def sse_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    return [json.loads(line[len("data:"):]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]


def test_no_session_is_issued_or_needed(server: HttpServer) -> None:
    response = post(server, INITIALIZE, BOTH)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in response.headers
    # A call with no initialize before it, and one carrying a session id from some other server's past.
    for extra in ({}, {"Mcp-Session-Id": "0123456789abcdef0123456789abcdef"}):
        response = post(server, CALL, {**JSON_ONLY, **extra})
        assert response.status_code == 200, response.text
        assert response.json()["result"]["structuredContent"]["conversationId"] == "orch"
        assert "mcp-session-id" not in response.headers


def test_a_call_streams_when_the_client_accepts_it(server: HttpServer) -> None:
    streamed = post(server, CALL, BOTH)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    (message,) = sse_messages(streamed)
    assert message["id"] == 7 and message["result"]["structuredContent"]["conversationId"] == "orch"
    plain = post(server, CALL, JSON_ONLY)
    assert plain.headers["content-type"].startswith("application/json")
    assert plain.json()["result"] == message["result"]
    # Everything but a call is one JSON answer, whatever the client accepts.
    listed = post(server, {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, BOTH)
    assert listed.headers["content-type"].startswith("application/json") and len(listed.json()["result"]["tools"]) == len(TOOLS)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_other_methods_are_not_allowed(server: HttpServer, method: str) -> None:
    response = httpx2.request(method, server.url, headers={**AUTH, "Accept": "text/event-stream"}, timeout=10)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert "stateless" in response.json()["error"]["message"]
    # The token and the Host check come first, for every method.
    assert httpx2.request(method, server.url, timeout=10).status_code == 401
    foreign = httpx2.request(method, server.url, headers={**AUTH, "Host": "evil.example"}, timeout=10)
    assert foreign.status_code == 421
