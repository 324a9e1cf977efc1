"""The shared server: `ccweb-index serve --transport http`, driven by the SDK's Streamable HTTP client.

Tokens, the per-request source header, interleaved clients, DNS-rebinding protection, the refusal to
listen on a non-loopback address without a token, the watcher keeping `scope: "all"` current, a
graceful SIGTERM, and many processes on one index under load.

This module is also the load test's worker: `python tests/test_http.py worker SPEC_JSON`.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import (
    CCWEB_INDEX,
    THOROUGH,
    Corpus,
    StdioClient,
    answer_of,
    cli,
    client_launch,
    session,
    stdio_client_for,
)

SOURCE_HEADER = "X-Ccweb-Source-Session"
TOKEN = "tok-" + "0123456789abcdef" * 2
LIST_INPUTS = "ccweb_list_user_inputs"
LIST_CONVERSATIONS = "ccweb_list_conversations"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    env.update(extra)
    return env


# --- the server as a subprocess ------------------------------------------------------------------


class HttpServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def healthz(self, **kwargs: Any) -> httpx2.Response:
        return httpx2.get(f"{self.base}/healthz", timeout=10, **kwargs)

    def detail(self) -> httpx2.Response:
        """`/healthz?detail=1` with the tests' token (the detail is for the token's holders)."""
        return self.healthz(params={"detail": "1"}, headers={"Authorization": f"Bearer {TOKEN}"})


def start_http_server(
    sessions_dir: Path, db: Path, log: Path, *, token: str | None = None, args: tuple[str, ...] = (),
    env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), healthy: bool = True,
) -> HttpServer:
    """The server, listening (and with `healthy`, past its first indexing pass). `prefix`: a command
    that runs the server (e.g. with resource limits)."""
    # Without a configured token the server makes one under the user config directory: the test's own.
    environment = _clean_env(XDG_CONFIG_HOME=str(log.parent / "config"), **(env or {}))
    if token is not None:
        environment["CCWEB_INDEX_TOKEN"] = token
    command = [*prefix, CCWEB_INDEX, "serve", "--transport", "http", "--port", "0", "--sessions-dir", str(sessions_dir), "--db", str(db), *args]
    with open(log, "wb") as err:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=environment)
    deadline = time.monotonic() + 30
    port = None
    while port is None:
        found = re.search(r"serving MCP on http://(?:\[[^\]]*\]|[^:/]+):(\d+)/mcp", log.read_text(errors="replace"))
        if found:
            port = int(found.group(1))
        elif proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the HTTP server did not start:\n{log.read_text(errors='replace')}")
        else:
            time.sleep(0.02)
    server = HttpServer(proc, port, log)
    while healthy:  # ready = listening and the first indexing pass done
        try:
            if server.healthz().status_code == 200:
                return server
        except httpx2.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the HTTP server never became healthy:\n{server.stderr()}")
        time.sleep(0.02)
    return server


def stop(server: HttpServer) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        raise AssertionError(f"the HTTP server did not stop on SIGTERM:\n{server.stderr()}") from None


@contextmanager
def http_server(sessions_dir: Path, db: Path, log: Path, **kwargs: Any) -> Iterator[HttpServer]:
    server = start_http_server(sessions_dir, db, log, **kwargs)
    try:
        yield server
    finally:
        stop(server)


# --- the SDK client ---------------------------------------------------------------------------------


def _headers(token: str | None, source: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = dict(extra or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if source is not None:
        headers[SOURCE_HEADER] = source
    return headers


@asynccontextmanager
async def http_session(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    timeout = httpx2.Timeout(30, read=120)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


@asynccontextmanager
async def outliving_the_server(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    """`http_session` for a server that stops first: the client's own teardown errors are ignored."""
    body_done = False
    try:
        async with http_session(url, headers) as client:
            yield client
            body_done = True
    except BaseException:
        if not body_done:
            raise


@contextmanager
def http_client_for(
    url: str, *, token: str | None = TOKEN, source: str | None = None, headers: dict[str, str] | None = None
) -> Iterator[StdioClient]:
    """A synchronous SDK client (the same wrapper the stdio tests use) over Streamable HTTP."""
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(http_session(url, _headers(token, source, headers))) as client:
            yield StdioClient(portal, client)


# --- a corpus with two orchestrators ----------------------------------------------------------------


def child_of(source: str, *inputs: str, updated: str) -> dict[str, Any]:
    return session(*inputs, updated=updated, created_from={"kind": "mcp", "sourceSessionId": source})


def write_two_families(corpus: Corpus) -> None:
    corpus.write("orchA", session("plan A", "ship A", updated="2026-11-20T00:00:00Z"))
    corpus.write("orchB", session("plan B", updated="2026-11-21T00:00:00Z", agent="codex"))
    corpus.write("a1", child_of("orchA", "part a1", updated="2026-11-22T00:00:00Z"))
    corpus.write("a2", child_of("orchA", "part a2", updated="2026-11-23T00:00:00Z"))
    corpus.write("b1", child_of("orchB", "part b1", updated="2026-11-24T00:00:00Z"))
    corpus.write("branchA", session("fork", updated="2026-11-25T00:00:00Z", created_from={"kind": "branch", "sourceSessionId": "orchA"}))


CHILDREN = {"orchA": ["a2", "a1"], "orchB": ["b1"]}
OWN_INPUTS = {"orchA": ["plan A", "ship A"], "orchB": ["plan B"]}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, Corpus, Path]]:
    """One server for the read-mostly tests: a token (from the environment) and an extra host name."""
    root = tmp_path_factory.mktemp("shared")
    corpus = Corpus(root / "sessions")
    write_two_families(corpus)
    db = root / "index.sqlite"
    with http_server(corpus.path, db, root / "server.log", token=TOKEN, args=("--allowed-host", "ccweb.internal")) as server:
        yield server, corpus, db


# --- tokens ---------------------------------------------------------------------------------------


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def raw_post(server: HttpServer, headers: dict[str, str], body: Any = INITIALIZE) -> httpx2.Response:
    return httpx2.post(server.url, json=body, headers={**MCP_HEADERS, **headers}, timeout=10)


def test_token_right_wrong_missing(shared: tuple[HttpServer, Corpus, Path]) -> None:
    server, _, _ = shared
    refused = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ]
    for headers in refused:
        response = raw_post(server, {**headers, SOURCE_HEADER: "orchA"})
        assert response.status_code == 401, headers
        # A person can act on it: which token is missing or wrong, and where the server's is set.
        assert response.headers["www-authenticate"].startswith('Bearer realm="ccweb-index"'), headers
        message = response.json()["error"]["message"]
        assert "CCWEB_INDEX_TOKEN" in message and "--token-file" in message, message
        # Claude Code 2.1 shows its user the body's first 200 characters, about 130 of the message.
        assert message.index("`ccweb-index token`") < 60, message
        assert TOKEN[:-1] not in response.text and "wrong" not in response.text, "the 401 echoes what was sent"
        assert "mcp-session-id" not in response.headers
    assert raw_post(server, {}).json()["error"]["message"].startswith("No bearer token sent.")
    # Codex 0.171 shows its user only this header: it says where the token is too.
    challenge = raw_post(server, {"Authorization": "Bearer wrong"}).headers["www-authenticate"]
    assert challenge == ('Bearer realm="ccweb-index", error="invalid_token", '
                         'error_description="Wrong bearer token; the token is what ccweb-index token prints"')  # fmt: skip
    # Claude Code sends a `${VAR}` of its config as written when VAR is not set where it runs.
    unexpanded = raw_post(server, {"Authorization": "Bearer ${CCWEB_INDEX_TOKEN}"}).json()["error"]["message"]
    assert unexpanded.startswith("Bearer token ${CCWEB_INDEX_TOKEN} sent unexpanded: the client has no such variable"), unexpanded
    # No OAuth to discover: a 404, with or without a token, so no client starts a flow that cannot end.
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):  # fmt: skip
        assert httpx2.get(f"{server.base}{path}", timeout=10).status_code == 404, path
    # Every other path and method needs the token, except GET /healthz.
    assert httpx2.get(f"{server.base}/nowhere", timeout=10).status_code == 401
    assert httpx2.get(server.url, timeout=10).status_code == 401
    assert httpx2.post(f"{server.base}/healthz", timeout=10).status_code == 401
    assert server.healthz(headers={"Authorization": "Bearer wrong"}).status_code == 200

    accepted = raw_post(server, {"Authorization": f"bearer {TOKEN}"})
    assert accepted.status_code == 200
    assert accepted.json()["result"]["serverInfo"]["name"] == "ccweb-index"

    # Through the SDK's client: the wrong token gets nowhere, the right one answers. (What the client
    # raises for a 401 is its own affair, wrapped by its task groups: any failure will do.)
    with pytest.raises(BaseException):  # noqa: B017
        with http_client_for(server.url, token="wrong", source="orchA") as client:
            client.call(LIST_INPUTS)
    with pytest.raises(BaseException):  # noqa: B017
        with http_client_for(server.url, token=None, source="orchA") as client:
            client.call(LIST_INPUTS)
    with http_client_for(server.url, source="orchA") as client:
        payload, is_error = client.call(LIST_INPUTS)
        assert not is_error and [i["content"] for i in payload["inputs"]] == OWN_INPUTS["orchA"]


def test_token_from_a_file(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    token_file = tmp_path / "token"
    token_file.write_text("file-token-0123456789abcdef\n")
    token_file.chmod(0o600)
    with http_server(corpus.path, db_path, tmp_path / "log", token="env-token-0123456789abcdef",
                     args=("--token-file", str(token_file))) as server:  # fmt: skip
        assert raw_post(server, {"Authorization": "Bearer env-token-0123456789abcdef"}).status_code == 401
        with http_client_for(server.url, token="file-token-0123456789abcdef", source="orchB") as client:
            payload, is_error = client.call(LIST_CONVERSATIONS, {"scope": "children"})
            assert not is_error and [r["conversationId"] for r in payload["conversations"]] == CHILDREN["orchB"]


# --- the source conversation --------------------------------------------------------------------------


def test_the_source_comes_from_the_header(shared: tuple[HttpServer, Corpus, Path]) -> None:
    server, _, _ = shared
    for source in ("orchA", "orchB"):
        with http_client_for(server.url, source=source) as client:
            payload, is_error = client.call(LIST_CONVERSATIONS, {"scope": "children"})
            assert not is_error
            assert payload["sourceConversationId"] == source and payload["scope"] == "children"
            assert [r["conversationId"] for r in payload["conversations"]] == CHILDREN[source]
            payload, is_error = client.call(LIST_INPUTS)
            assert not is_error and payload["conversationId"] == source
            assert [i["content"] for i in payload["inputs"]] == OWN_INPUTS[source]
            # An explicit conversationId still wins over the source.
            payload, _ = client.call(LIST_INPUTS, {"conversationId": "b1"})
            assert [i["content"] for i in payload["inputs"]] == ["part b1"]

    # No header, an invalid id, or two headers that disagree: no source.
    for headers in ({}, {SOURCE_HEADER: "../orchA"}, {SOURCE_HEADER: ""}):
        with http_client_for(server.url, headers=headers) as client:
            payload, is_error = client.call(LIST_CONVERSATIONS, {"scope": "children"})
            assert is_error and payload["error"]["code"] == "missing_source_conversation"
            payload, is_error = client.call(LIST_INPUTS)
            assert is_error and payload["error"]["code"] == "missing_source_conversation"
            payload, is_error = client.call(LIST_CONVERSATIONS)
            assert not is_error and payload["scope"] == "all" and payload["sourceConversationId"] is None
    ambiguous = httpx2.post(
        server.url,
        content=json.dumps(INITIALIZE),
        headers=[*MCP_HEADERS.items(), ("Authorization", f"Bearer {TOKEN}"), (SOURCE_HEADER, "orchA"), (SOURCE_HEADER, "orchB")],
        timeout=10,
    )
    assert ambiguous.status_code == 200  # accepted; the tools then see no source (checked in the unit test below)


def test_two_headers_are_no_source() -> None:
    from starlette.requests import Request

    from ccweb_index.server.http import source_from_request

    class Ctx:
        def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
            self.request = Request({"type": "http", "method": "POST", "path": "/mcp", "headers": headers})

    name = SOURCE_HEADER.lower().encode()
    assert source_from_request(Ctx([(name, b"orchA")])) == "orchA"
    assert source_from_request(Ctx([(name, b"orchA"), (name, b"orchA")])) == "orchA"
    assert source_from_request(Ctx([(name, b"orchA"), (name, b"orchB")])) is None
    assert source_from_request(Ctx([])) is None
    assert source_from_request(type("NoRequest", (), {"request": None})()) is None


def test_interleaved_clients_never_see_each_others_source(shared: tuple[HttpServer, Corpus, Path]) -> None:
    server, _, _ = shared

    def run(source: str) -> list[str]:
        problems = []
        with http_client_for(server.url, source=source) as client:
            for n in range(60):
                if n % 2:
                    payload, is_error = client.call(LIST_CONVERSATIONS, {"scope": "children"})
                    got = (payload.get("sourceConversationId"), [r["conversationId"] for r in payload.get("conversations", [])])
                    if is_error or got != (source, CHILDREN[source]):
                        problems.append(f"{source}: children answer {payload}")
                else:
                    payload, is_error = client.call(LIST_INPUTS)
                    got = (payload.get("conversationId"), [i["content"] for i in payload.get("inputs", [])])
                    if is_error or got != (source, OWN_INPUTS[source]):
                        problems.append(f"{source}: inputs answer {payload}")
        return problems

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, ["orchA", "orchB", "orchA", "orchB"]))
    assert results == [[], [], [], []]


def test_http_answers_exactly_as_stdio(shared: tuple[HttpServer, Corpus, Path]) -> None:
    """The stdio servers share the HTTP server's index: the changeToken is the index's, so the same."""
    server, corpus, db = shared
    calls = [
        (LIST_CONVERSATIONS, {"scope": "children"}),
        (LIST_CONVERSATIONS, {}),
        (LIST_CONVERSATIONS, {"agent": "CODEX", "limit": 1}),
        (LIST_INPUTS, {}),
        (LIST_INPUTS, {"maxChars": 3, "limit": 1}),
        (LIST_INPUTS, {"conversationId": "ghost"}),
        ("no_such_tool", {}),
    ]
    for source in ("orchA", None):
        with http_client_for(server.url, source=source) as over_http, \
                stdio_client_for(corpus.path, db, source=source) as over_stdio:  # fmt: skip
            for name, arguments in calls:
                assert over_http.call(name, arguments) == over_stdio.call(name, arguments), (source, name, arguments)
            assert over_http.list_tools().tools == over_stdio.list_tools().tools


# --- DNS rebinding -----------------------------------------------------------------------------------


def test_a_foreign_host_or_origin_is_refused(shared: tuple[HttpServer, Corpus, Path]) -> None:
    server, _, _ = shared
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for headers in (
        {"Host": f"evil.example:{server.port}"},
        {"Host": "evil.example"},
        {"Host": f"127.0.0.1.evil.example:{server.port}"},
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{server.port}"},
    ):
        response = raw_post(server, {**auth, **headers})
        assert 400 <= response.status_code < 500, headers
        assert "mcp-session-id" not in response.headers
        assert 400 <= server.healthz(headers=headers).status_code < 500
    for headers in (
        {"Host": f"localhost:{server.port}"},
        {"Host": f"ccweb.internal:{server.port}"},  # --allowed-host
        {"Origin": f"http://127.0.0.1:{server.port}"},
        {"Origin": f"https://ccweb.internal:{server.port}"},
        # Host names are caseless: these were refused (found by an independent test).
        {"Host": f"LocalHost:{server.port}"},
        {"Host": f"CCWEB.Internal:{server.port}"},
        {"Origin": f"HTTPS://CCWeb.Internal:{server.port}"},
    ):
        assert raw_post(server, {**auth, **headers}).status_code == 200, headers


# --- refusing to listen in the open ---------------------------------------------------------------------


def test_tcp_without_a_token_is_refused_by_the_library() -> None:
    """The command line always has a token for TCP (the default one); the library refuses none."""
    from ccweb_index.server.http import StartupError, check_bind

    for host in ("127.0.0.1", "0.0.0.0", "::"):
        with pytest.raises(StartupError, match="without a token"):
            check_bind(host, None)
        check_bind(host, TOKEN)
    check_bind("127.0.0.1", None, "/run/user/1000/ccweb.sock")  # a unix socket checks the peer's uid instead


def test_a_non_loopback_address_gets_the_default_token(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", args=("--host", "0.0.0.0")) as server:
        assert server.healthz().json() == {"ok": True}
        assert raw_post(server, {}).status_code == 401
        token = (tmp_path / "config" / "ccweb-index" / "token").read_text().strip()
        assert raw_post(server, {"Authorization": f"Bearer {token}"}).status_code == 200


def test_http_only_options_are_refused_for_stdio(corpus: Corpus, db_path: Path) -> None:
    result = cli("serve", "--port", "9", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert result.returncode == 2 and "--port only applies to --transport http" in result.stderr, result.stderr
    result = cli("serve", "--port", "9", "--host", "::1", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert result.returncode == 2 and "--host, --port only apply to --transport http" in result.stderr, result.stderr


# --- the watcher, health ----------------------------------------------------------------------------


def test_healthz_reports_without_session_data(shared: tuple[HttpServer, Corpus, Path]) -> None:
    server, _, _ = shared
    response = server.healthz(params={"detail": "1"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    doc = response.json()
    assert doc["ok"] is True and doc["sessions"] >= 6 and doc["lastReconcile"].endswith("Z")
    assert doc["watcher"]["enabled"] is True and doc["watcher"]["running"] is True
    assert isinstance(doc["watcher"]["lagSeconds"], (int, float)) and doc["watcher"]["lagSeconds"] >= 0
    for secret in ("orchA", "a1", "plan A", "part"):
        assert secret not in response.text


def test_the_watcher_keeps_scope_all_current(shared: tuple[HttpServer, Corpus, Path]) -> None:
    """Write in place, then call: the very first answer has the session on top. Lag is measured only."""
    server, corpus, _ = shared
    ids = [f"lag{n}" for n in range(4)]
    for session_id in ids:
        corpus.write(session_id, session("x", updated="2000-01-01T00:00:00.000Z"))
    lags = []
    with http_client_for(server.url) as client:
        client.call(LIST_CONVERSATIONS, {"limit": 1})
        for n in range(40):
            session_id = ids[n % len(ids)]
            stamp = f"2099-01-01T00:{n // 60:02d}:{n % 60:02d}.000Z"  # newer each time, same size
            corpus.write(session_id, session("x", updated=stamp), how="inplace")
            written = time.perf_counter()
            payload, is_error = client.call(LIST_CONVERSATIONS, {"limit": 1})
            lags.append(time.perf_counter() - written)
            assert not is_error
            top = payload["conversations"][0]
            assert (top["conversationId"], top["updatedAt"]) == (session_id, stamp), "the answer is stale"
    lags.sort()
    print(f"\nwatcher lag over HTTP (write -> visible on top of scope all), n={len(lags)}: "
          f"p50 {statistics.median(lags) * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms")  # fmt: skip
    assert server.healthz(params={"detail": "1"}, headers={"Authorization": f"Bearer {TOKEN}"}).json()["watcher"]["running"] is True


def test_watcher_lag_is_the_age_of_unapplied_events() -> None:
    from ccweb_index.indexer.watch import _DirtySet
    from ccweb_index.server.health import watcher_lag

    class Watcher:
        dirty = _DirtySet()

    assert watcher_lag(Watcher) == (0.0, 0)
    Watcher.dirty.add("a")
    assert Watcher.dirty.oldest_pending_at is not None
    Watcher.dirty.oldest_pending_at -= 2.0
    Watcher.dirty.add("b")  # a newer change does not hide the older one
    lag, pending = watcher_lag(Watcher)
    assert pending == 2 and lag >= 2.0
    Watcher.dirty.take()
    assert watcher_lag(Watcher) == (0.0, 0)
    assert watcher_lag(object()) == (0.0, 0)  # a watcher without a dirty set (or none at all)


def test_without_a_watcher_answers_stay_fresh(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--no-watch",)) as server:
        doc = server.healthz(params={"detail": "1"}, headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert doc["ok"] is True and doc["watcher"] == {"enabled": False, "running": False, "lagSeconds": 0, "pendingEvents": 0}
        with http_client_for(server.url, source="orchB") as client:
            corpus.write("b2", child_of("orchB", "late part", updated="2026-11-26T00:00:00Z"))
            corpus.write("orchA", session("plan A", updated="2099-01-01T00:00:00Z"))
            payload, _ = client.call(LIST_CONVERSATIONS, {"scope": "children"})
            assert [r["conversationId"] for r in payload["conversations"]] == ["b2", "b1"]
            payload, _ = client.call(LIST_CONVERSATIONS, {"limit": 1})
            assert payload["conversations"][0]["conversationId"] == "orchA"


# --- graceful stop ----------------------------------------------------------------------------------


def test_sigterm_lets_the_call_in_flight_finish_then_exits_0(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    log = tmp_path / "log"
    server = start_http_server(corpus.path, db_path, log, args=("--token-file", str(token_file), "-v"))
    try:
        with start_blocking_portal() as portal:
            with portal.wrap_async_context_manager(outliving_the_server(server.url, _headers(TOKEN, "orchA"))) as client:
                # The SDK's client lists the tools once to check answers against their output schema.
                portal.call(client.list_tools)
                # Hold the index's write lock, so the next call blocks inside the server until released.
                blocker = sqlite3.connect(db_path, isolation_level=None)
                blocker.execute("BEGIN IMMEDIATE")
                corpus.write("orchA", session("plan A", "ship A", "and tell me", updated="2026-11-20T00:00:00Z"))
                in_flight = portal.start_task_soon(client.call_tool, LIST_INPUTS, {})
                deadline = time.monotonic() + 30
                while "DEBUG tool call" not in server.stderr() and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert "DEBUG tool call" in server.stderr()
                server.proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                assert server.proc.poll() is None, "the server exited with a call in flight"
                assert not in_flight.done()
                blocker.execute("ROLLBACK")
                blocker.close()
                result = in_flight.result(timeout=30)
                assert not result.is_error
                assert [i["content"] for i in result.structured_content["inputs"]] == ["plan A", "ship A", "and tell me"]
        assert server.proc.wait(timeout=40) == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert "stopped" in server.stderr() and "Traceback" not in server.stderr()
    assert not Path(f"{db_path}-wal").exists(), "the index was not closed cleanly (WAL left behind)"
    # And the watcher and the index were closed: a fresh open sees a consistent index.
    check = sqlite3.connect(db_path)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


def test_sigint_also_stops_cleanly(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    server = start_http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN)
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(outliving_the_server(server.url, _headers(TOKEN, "orchA"))) as client:
            assert not portal.call(client.call_tool, LIST_INPUTS, {}).is_error
            server.proc.send_signal(signal.SIGINT)
            assert server.proc.wait(timeout=40) == 0
    assert "stopped" in server.stderr()


# --- many processes, one index ------------------------------------------------------------------------

# Full size in the thorough run (conftest.THOROUGH); by default enough processes of each kind to share
# the index under writes (two stdio servers, the HTTP server and the daemon), for fewer calls.
WORKERS = 8 if THOROUGH else 3
CALLS = 300 if THOROUGH else 40
STDIO_WORKERS = 5 if THOROUGH else 2
SOURCES = [f"src{k}" for k in range(4)]


def load_corpus(corpus: Corpus) -> dict[str, list[str]]:
    """Four orchestrators with four children each, and a few others. Every input names its session."""
    children: dict[str, list[str]] = {}
    for k, source in enumerate(SOURCES):
        corpus.write(source, session(f"{source}: go", agent="claude", updated=f"2026-11-0{k + 1}T00:00:00Z"))
        children[source] = []
        for j in range(4):
            child = f"c{k}x{j}"
            corpus.write(child, child_of(source, f"{child}: one", f"{child}: two", updated=f"2026-11-1{j}T00:00:00Z"))
            children[source].append(child)
    for n in range(6):
        corpus.write(f"other{n}", session(f"other{n}: hi", agent="codex", updated=f"2026-10-0{n + 1}T00:00:00Z"))
    return children


def rewrite_forever(corpus: Corpus, children: dict[str, list[str]], stop_event: threading.Event) -> int:
    """The writer: in-place and atomic rewrites of existing sessions, and new children (atomically)."""
    rng = random.Random(7)
    writes = 0
    ids = [i for k in children for i in [k, *children[k]]] + [f"other{n}" for n in range(6)]
    while not stop_event.is_set():
        session_id = rng.choice(ids)
        k = int(session_id[1]) if session_id.startswith("c") else None
        stamp = f"2026-12-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00.000Z"
        inputs = [f"{session_id}: take {n}" for n in range(rng.randint(1, 5))]
        if k is not None:
            doc = child_of(SOURCES[k], *inputs, updated=stamp)
        else:
            doc = session(*inputs, updated=stamp, agent=rng.choice(["claude", "codex"]))
        corpus.write(session_id, doc, how=rng.choice(["inplace", "atomic"]))
        writes += 1
        if writes % 50 == 0:  # a new child, created the way cc-web does: complete on first sight
            k = rng.randrange(len(SOURCES))
            new_id = f"c{k}x{100 + writes}"
            corpus.write(new_id, child_of(SOURCES[k], f"{new_id}: new", updated=stamp), how="atomic")
        time.sleep(0.01)
    return writes


def check_answer(name: str, arguments: dict[str, Any], source: str, payload: dict[str, Any], is_error: bool) -> str | None:
    """None when the answer is well-formed and about the right conversations; else what is wrong."""
    if is_error:
        return f"{name} {arguments}: error {payload}"
    if name == LIST_INPUTS:
        wanted = arguments.get("conversationId", source)
        inputs = payload["inputs"]
        ok = (
            payload["conversationId"] == wanted
            and payload["returnedCount"] == len(inputs) >= 1
            and payload["totalChars"] == sum(i["contentChars"] for i in inputs) <= payload["maxChars"]
            and all(i["content"].startswith(f"{wanted}:") or i["truncated"] for i in inputs)
            and all(set(i) == {"messageId", "createdAt", "content", "contentChars", "originalChars", "truncated"} for i in inputs)
        )
    else:
        rows = payload["conversations"]
        keys = {"conversationId", "title", "agent", "status", "createdAt", "updatedAt", "createdFromKind", "parentConversationId", "userInputCount"}
        ok = (
            payload["returnedCount"] == len(rows) <= payload["limit"]
            and all(set(r) == keys for r in rows)
            and rows == in_answer_order(rows)
        )
        if arguments.get("scope") == "children":
            k = SOURCES.index(source)
            ok = ok and payload["sourceConversationId"] == source and len(rows) >= 4
            ok = ok and all(r["conversationId"].startswith(f"c{k}x") and r["createdFromKind"] == "mcp" for r in rows)
        if arguments.get("agent"):
            ok = ok and all(r["agent"] == arguments["agent"] for r in rows)
    return None if ok else f"{name} {arguments} (source {source}): malformed {payload}"


def in_answer_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """updatedAt descending, then conversationId ascending (the times share one ISO format)."""
    ordered = sorted(rows, key=lambda r: r["conversationId"])
    return sorted(ordered, key=lambda r: r["updatedAt"], reverse=True)


async def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    import anyio
    from mcp import StdioServerParameters, stdio_client

    source = spec["source"]
    k = SOURCES.index(source)
    rng = random.Random(spec["seed"])
    plan = []
    for n in range(spec["calls"]):
        choice = n % 5
        if choice == 0:
            plan.append((LIST_INPUTS, {}))
        elif choice == 1:
            plan.append((LIST_INPUTS, {"conversationId": f"c{k}x{rng.randrange(4)}", "limit": 3}))
        elif choice == 2:
            plan.append((LIST_CONVERSATIONS, {"scope": "children", "limit": 50}))
        elif choice == 3:
            plan.append((LIST_CONVERSATIONS, {"limit": 5}))
        else:
            plan.append((LIST_CONVERSATIONS, {"agent": rng.choice(["claude", "codex"]), "limit": 3}))

    @asynccontextmanager
    async def connect() -> AsyncIterator[ClientSession]:
        if spec["transport"] == "http":
            async with http_session(spec["url"], _headers(spec.get("token"), source)) as client:
                yield client
        else:
            command, *prefix = spec["launch"]
            params = StdioServerParameters(
                command=command,
                args=[*prefix, "serve", "--sessions-dir", spec["sessions_dir"], "--db", spec["db"]],
                env=_clean_env(CCWEB_SOURCE_SESSION_ID=source),
            )
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                yield client

    errors: list[str] = []
    done = 0
    started = time.perf_counter()
    try:
        async with connect() as client:
            for name, arguments in plan:
                try:
                    result = await client.call_tool(name, arguments)
                    shape, payload = answer_of(result)
                    if shape is not None:
                        errors.append(f"{name}: {shape}")
                    else:
                        problem = check_answer(name, arguments, source, payload, bool(result.is_error))
                        if problem:
                            errors.append(problem)
                except Exception as exc:  # anything reaching the client is a failure
                    errors.append(f"{name} {arguments}: {type(exc).__name__}: {exc}")
                done += 1
    except BaseException as exc:
        errors.append(f"connection: {type(exc).__name__}: {exc}")
    await anyio.sleep(0)
    return {"calls": done, "errors": errors[:10], "error_count": len(errors), "seconds": time.perf_counter() - started}


@pytest.mark.slow
def test_many_processes_one_index_under_writes(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """A watch daemon, stdio servers and the HTTP server on one index; WORKERS client processes x CALLS
    calls, every answer checked, while sessions are rewritten."""
    children = load_corpus(corpus)
    env = _clean_env()
    watch_log = open(tmp_path / "watch.log", "wb")
    daemon = subprocess.Popen(
        [CCWEB_INDEX, "watch", "--sessions-dir", str(corpus.path), "--db", str(db_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=watch_log, env=env,
    )  # fmt: skip
    server = start_http_server(corpus.path, db_path, tmp_path / "http.log", token=TOKEN)
    stop_writing = threading.Event()
    workers: list[subprocess.Popen[bytes]] = []
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(1) as pool:
            writer = pool.submit(rewrite_forever, corpus, children, stop_writing)
            for n in range(WORKERS):
                spec = {
                    "transport": "stdio" if n < STDIO_WORKERS else "http",
                    "source": SOURCES[n % len(SOURCES)],
                    "calls": CALLS,
                    "seed": n,
                    "url": server.url,
                    "token": TOKEN,
                    "launch": client_launch(),
                    "sessions_dir": str(corpus.path),
                    "db": str(db_path),
                }
                with open(tmp_path / f"worker{n}.log", "wb") as err:
                    workers.append(subprocess.Popen(
                        [sys.executable, __file__, "worker", json.dumps(spec)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env,
                    ))  # fmt: skip
            outputs = [w.communicate(timeout=240)[0] for w in workers]
            stop_writing.set()
            writes = writer.result()
        elapsed = time.perf_counter() - started
        reports = []
        for n, (worker, out) in enumerate(zip(workers, outputs, strict=True)):
            assert worker.returncode == 0, (tmp_path / f"worker{n}.log").read_text(errors="replace")[-3000:]
            reports.append(json.loads(out))
        problems = [e for r in reports for e in r["errors"]]
        assert problems == [], problems
        assert [r["calls"] for r in reports] == [CALLS] * WORKERS
        assert writes > 0
        assert server.proc.poll() is None and daemon.poll() is None
        for log in (server.stderr(), (tmp_path / "watch.log").read_text(errors="replace")):
            assert "locked" not in log and "Traceback" not in log, log[-3000:]
        print(f"\n{WORKERS} processes x {CALLS} calls ({STDIO_WORKERS} stdio, {WORKERS - STDIO_WORKERS} HTTP) "
              f"with {writes} rewrites: {elapsed:.1f} s; per worker "
              + ", ".join(f"{r['seconds']:.1f}" for r in reports))  # fmt: skip
    finally:
        stop_writing.set()
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        assert stop(server) == 0
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        watch_log.close()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    import anyio

    print(json.dumps(anyio.run(_worker, json.loads(sys.argv[2]))))
