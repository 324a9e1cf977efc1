"""The shared server against floods (issue #11 items 3 and 4), each limit tested by the flood it stops.

Every flood runs on loopback, bounded in count and time. Times are printed (docs/reliability.md has
the figures), never asserted: what is asserted is what happens, and in which order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import zygote
from test_http import (
    INITIALIZE,
    LIST_CONVERSATIONS,
    LIST_INPUTS,
    MCP_HEADERS,
    OWN_INPUTS,
    SOURCE_HEADER,
    TOKEN,
    HttpServer,
    _clean_env,
    http_client_for,
    http_server,
    start_http_server,
    stop,
    write_two_families,
)

from conftest import CCWEB_INDEX, Corpus, session

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call_body(name: str, arguments: dict[str, Any] | None = None, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments or {}}}


def post_call(server: HttpServer, source: str | None, body: dict[str, Any], client: httpx2.Client | None = None) -> dict[str, Any]:
    """One tools/call as plain JSON (the client does not offer SSE); the JSON-RPC response."""
    headers = {"Accept": "application/json", "Content-Type": "application/json", **AUTH}
    if source is not None:
        headers[SOURCE_HEADER] = source
    post = client.post if client is not None else httpx2.post
    response = post(server.url, json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def tool_payload(response: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    result = response["result"]
    return json.loads(result["content"][0]["text"]), bool(result.get("isError"))


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` seconds (reading and dropping what it sends)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# --- timeouts ----------------------------------------------------------------------------------------


def test_a_slowloris_is_cut_off_at_the_read_timeout(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """One header line every 0.5 s (the issue's attack sent one every 5 s, for ever): without the read
    timeout the connection stays open while the lines keep coming."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--read-timeout", "2")) as server:
        sock = connect(server)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        lines = 0
        try:
            for lines in range(1, 41):  # 20 s of trickle at most
                time.sleep(0.5)
                sock.sendall(f"X-Trickle-{lines}: x\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass
        cut_after = time.monotonic() - started
        sock.close()
        assert lines < 40, "the trickling connection was never cut"
        print(f"\nslowloris cut after {cut_after:.1f} s ({lines} header lines; --read-timeout 2)")
        # A connection that sends nothing at all is cut the same way.
        silent = connect(server)
        assert closed_by_server(silent, within=15)
        silent.close()
        assert server.detail().json()["connections"]["timedOut"] >= 2


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--keep-alive-timeout", "1")) as server:
        sock = connect(server)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" not in answer.lower()
        started = time.monotonic()
        assert closed_by_server(sock, within=15), "an idle keep-alive connection stayed open"
        print(f"\nidle keep-alive connection closed after {time.monotonic() - started:.1f} s (--keep-alive-timeout 1)")
        sock.close()


# --- the connection cap and the descriptors ----------------------------------------------------------------


@contextmanager
def idle_flood(server: HttpServer, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send nothing (the issue's 1,100 idle connections, scaled down)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            try:
                socks.append(connect(server))
            except OSError:
                break
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_an_idle_flood_cannot_lock_a_client_out(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """More idle connections than the cap: each new connection evicts the longest-idle one, so a client
    still gets its answers, and /healthz says the connections are saturated."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--max-connections", "20")) as server:
        with idle_flood(server, 60) as flood:
            assert len(flood) == 60
            times = []
            for _ in range(5):
                started = time.monotonic()
                with http_client_for(server.url, source="orchA") as client:
                    payload, is_error = client.call(LIST_INPUTS)
                times.append(time.monotonic() - started)
                assert not is_error and [i["content"] for i in payload["inputs"]] == OWN_INPUTS["orchA"]
            health = server.healthz()
            doc = server.detail().json()
            evicted = sum(closed_by_server(sock, within=0.01) for sock in flood)
        print(f"\nidle flood of 60 (cap 20): a client's session answered in {max(times):.2f} s at most; "
              f"{evicted} of the flood's connections evicted")  # fmt: skip
        assert evicted >= 40
        assert health.status_code == 503 and health.json() == {"ok": False}
        assert doc["status"] == "connections saturated" and doc["connections"]["evicted"] >= 40
        assert doc["connections"]["open"] <= doc["connections"]["max"] == 20


def _prlimit_prefix(soft: int, hard: int) -> tuple[str, ...]:
    return zygote.rlimit_prefix(RLIMIT_NOFILE=(soft, hard))


def test_descriptors_are_reserved_for_the_service(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """A flood beyond the soft open-files limit (the issue's lock-out): the soft limit is raised to the
    hard one, connections stay below it less the reserve, and the watcher, the index and new clients
    keep working. Without the cap the flood takes every descriptor and accept() fails in a loop."""
    soft, hard = 200, 400
    write_two_families(corpus)
    server = start_http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, prefix=_prlimit_prefix(soft, hard))
    try:
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        assert re.search(rf"Max open files\s+{hard}\s+{hard}", limits), limits
        cap = server.detail().json()["connections"]["max"]
        assert cap < hard - 128, "the cap leaves the reserve free"
        assert re.search(rf"--max-connections 512 lowered to {cap}", server.stderr())
        with idle_flood(server, hard + 50) as flood:
            corpus.write("late", session("written during the flood", updated="2099-01-01T00:00:00Z"))
            with http_client_for(server.url, source="late") as client:
                payload, is_error = client.call(LIST_INPUTS)
                assert not is_error and [i["content"] for i in payload["inputs"]] == ["written during the flood"]
                payload, _ = client.call(LIST_CONVERSATIONS, {"limit": 1})
                assert payload["conversations"][0]["conversationId"] == "late"
            doc = server.detail().json()
            print(f"\n{len(flood)} idle connections against {hard} descriptors: {doc['connections']['open']} held "
                  f"(cap {cap}), {doc['openFiles']['open']} descriptors open")  # fmt: skip
            assert doc["openFiles"]["open"] < hard
            assert doc["watcher"]["running"]
        assert "out of system resource" not in server.stderr() and "Traceback" not in server.stderr()
    finally:
        stop(server)


ACCEPT_FLOOD = r"""
import asyncio, logging, resource, socket, sys, time
from ccweb_index.server.limits import client_lines_throttled

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="LOG %(name)s %(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
interval, seconds = float(sys.argv[1]), float(sys.argv[2])

async def main():
    held = []
    server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(seconds)

with client_lines_throttled(interval):
    asyncio.run(main())
"""


def test_the_accept_error_is_logged_once_a_minute_with_a_count(tmp_path: Path) -> None:
    """Out of descriptors, asyncio retries accept() every second and logs each failure with its
    traceback (the issue saw 75,000 lines). With the filter: one line per interval, with a count."""
    script = tmp_path / "accept_flood.py"
    script.write_text(ACCEPT_FLOOD)
    seconds = 6.0
    proc = subprocess.Popen([sys.executable, str(script), "2", str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    clients = []
    for _ in range(100):  # more than the 40 descriptors the server may have: accept() keeps failing
        clients.append(socket.create_connection(("127.0.0.1", port)))
    _, err = proc.communicate(timeout=60)
    for client in clients:
        client.close()
    lines = [line for line in err.splitlines() if "out of system resource" in line]
    held_back = [int(m.group(1)) for m in (re.search(r"; (\d+) more since", line) for line in lines) if m]
    print(f"\naccept errors over {seconds:.0f} s, logged every 2 s: {len(lines)} lines, {sum(held_back)} held back")
    assert "Traceback" not in err, err[-2000:]
    assert 1 <= len(lines) <= seconds / 2 + 1, err[-2000:]
    assert len(held_back) == len(lines) and sum(held_back) >= 1, "the count of the held-back errors is missing"


def test_lines_a_client_causes_at_will_are_logged_once_a_minute(tmp_path: Path) -> None:
    """A foreign Host on /healthz (no token needed), a request line that is not HTTP: each used to
    log a line per request, a flood of the log by anyone who can connect (99 MB in 5 s with an 8 KB
    Host, found by an independent test). One line of each kind now, cut short, with a count."""
    corpus = Corpus(tmp_path / "sessions")
    corpus.write("a", session("x"))
    server = start_http_server(corpus.path, tmp_path / "db.sqlite", tmp_path / "server.log", token=TOKEN)
    try:
        with httpx2.Client(base_url=server.base, timeout=10) as client:
            for n in range(200):
                assert client.get("/healthz", headers={"Host": f"evil{n}.example" + "x" * 8000}).status_code == 421
        for _ in range(50):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                sock.recv(1024)
        assert server.healthz().status_code == 200
    finally:
        stop(server)
    log = server.stderr()
    hosts = [line for line in log.splitlines() if "Invalid Host header" in line]
    garbage = [line for line in log.splitlines() if "Invalid HTTP request" in line]
    assert len(hosts) == 1 and len(garbage) == 1, log[-3000:]
    assert len(hosts[0]) < 400 and "logged at most once every 60 s" in hosts[0], hosts
    assert "Traceback" not in log


# --- calls in flight ----------------------------------------------------------------------------------------


@contextmanager
def index_locked(db: Path, corpus: Corpus, *sources: str) -> Iterator[None]:
    """Calls about `sources` block inside the server (each needs to write the changed file to the index,
    whose write lock this holds) until the lock is released or the busy timeout passes."""
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    for source in sources:
        corpus.write(source, session(f"{source} again", updated="2026-12-01T00:00:00Z"))
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_calls_beyond_the_caps_are_refused_at_once(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """Per client (source) 2, overall 3: the calls beyond are answered `too_many_calls` while the admitted
    ones are still in progress (no queue), and every admitted call is answered normally."""
    write_two_families(corpus)
    corpus.write("orchC", session("plan C", updated="2026-11-21T00:00:00Z"))
    args = ("--no-watch", "--max-calls-per-client", "2", "--max-calls", "3")
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=args) as server, ThreadPoolExecutor(8) as pool:
        with index_locked(db_path, corpus, "orchA", "orchB", "orchC"):
            admitted = [pool.submit(post_call, server, "orchA", call_body(LIST_INPUTS, request_id=n)) for n in (1, 2)]
            _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 2)
            per_client = [tool_payload(post_call(server, "orchA", call_body(LIST_INPUTS, request_id=n))) for n in (3, 4)]
            admitted.append(pool.submit(post_call, server, "orchB", call_body(LIST_INPUTS, request_id=5)))
            _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 3)
            overall = tool_payload(post_call(server, "orchC", call_body(LIST_INPUTS, request_id=6)))
            assert not any(f.done() for f in admitted), "the refusals came back only after the admitted calls"
            health = server.healthz()
        for payload, is_error in per_client:
            assert is_error and payload["error"]["code"] == "too_many_calls"
            assert "--max-calls-per-client" in payload["error"]["message"]
        assert overall[1] and overall[0]["error"]["code"] == "too_many_calls" and "--max-calls)" in overall[0]["error"]["message"]
        assert health.status_code == 503
        for future, source in zip(admitted, ["orchA", "orchA", "orchB"]):
            payload, is_error = tool_payload(future.result(timeout=60))
            assert not is_error and [i["content"] for i in payload["inputs"]] == [f"{source} again"]
        doc = server.detail().json()
        assert doc["calls"]["inFlight"] == 0 and doc["calls"]["refused"] == 3
        # Room again: the same client is admitted.
        payload, is_error = tool_payload(post_call(server, "orchA", call_body(LIST_INPUTS)))
        assert not is_error


def _wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_call_counts_until_its_work_ends_even_if_the_client_hangs_up(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """A client that hangs up cannot stop the worker thread answering its call; the call keeps its slot
    until the thread is done, so hanging up and calling again cannot pile up work."""
    write_two_families(corpus)
    args = ("--no-watch", "--max-calls-per-client", "1")
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=args) as server:
        with index_locked(db_path, corpus, "orchA"):
            sock = connect(server)
            body = json.dumps(call_body(LIST_INPUTS)).encode()
            sock.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n{SOURCE_HEADER}: orchA\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            )
            _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 1)
            sock.close()  # hang up while the call waits for the index
            time.sleep(0.3)
            payload, is_error = tool_payload(post_call(server, "orchA", call_body(LIST_INPUTS, request_id=2)))
            assert is_error and payload["error"]["code"] == "too_many_calls"
        _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 0)
        payload, is_error = tool_payload(post_call(server, "orchA", call_body(LIST_INPUTS, request_id=3)))
        assert not is_error and [i["content"] for i in payload["inputs"]] == ["orchA again"]


async def _refused_through_the_sdk(url: str, mode: str) -> tuple[dict[str, Any], bool]:
    """One capped call by the Python SDK's `Client` in `mode`, which validates the result as its era's."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={**AUTH, SOURCE_HEADER: "orchB"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            result = await client.call_tool(LIST_CONVERSATIONS, {"scope": "children"})
    return json.loads(result.content[0].text), result.is_error


def test_a_refusal_reads_as_a_tool_error_in_either_protocol_era(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """The refusal is built without the SDK (no handler runs): it must still be a result each era's
    client accepts. A 2026-07-28 client requires `resultType`, which a handshake-era result has none of."""
    import anyio

    write_two_families(corpus)
    args = ("--no-watch", "--max-calls", "1")
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=args) as server, ThreadPoolExecutor(1) as pool:
        with index_locked(db_path, corpus, "orchA"):
            held = pool.submit(post_call, server, "orchA", call_body(LIST_INPUTS))
            _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 1)
            for mode in ("legacy", "2026-07-28"):
                payload, is_error = anyio.run(_refused_through_the_sdk, server.url, mode)
                assert is_error and payload["error"]["code"] == "too_many_calls", mode
        assert not tool_payload(held.result(timeout=60))[1]


def test_one_clients_flood_leaves_another_client_served(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """orchA floods (waves of 64 concurrent calls) while orchB calls one at a time: orchB is never
    refused and every answer is right; orchA's excess is refused. orchB's times are printed."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN) as server:
        stop_flood = threading.Event()
        refused = answered = 0

        def flood() -> None:
            nonlocal refused, answered
            with httpx2.Client(limits=httpx2.Limits(max_connections=64)) as client, ThreadPoolExecutor(64) as pool:
                while not stop_flood.is_set():
                    wave = [pool.submit(post_call, server, "orchA", call_body(LIST_INPUTS, request_id=n), client) for n in range(64)]
                    for future in wave:
                        payload, is_error = tool_payload(future.result())
                        refused += is_error and payload["error"]["code"] == "too_many_calls"
                        answered += not is_error

        flooder = threading.Thread(target=flood)
        flooder.start()
        times = []
        try:
            with httpx2.Client() as client:
                for n in range(40):
                    started = time.monotonic()
                    payload, is_error = tool_payload(post_call(server, "orchB", call_body(LIST_INPUTS, request_id=n), client))
                    times.append(time.monotonic() - started)
                    assert not is_error, payload
                    assert [i["content"] for i in payload["inputs"]] == OWN_INPUTS["orchB"]
        finally:
            stop_flood.set()
            flooder.join(timeout=120)
        times.sort()
        print(f"\nunder orchA's flood ({answered} answered, {refused} refused): orchB p50 {times[len(times) // 2] * 1000:.0f} ms, "
              f"max {times[-1] * 1000:.0f} ms")  # fmt: skip
        assert refused > 0 and answered > 0


# --- JSON-RPC ids and the source header, per request ----------------------------------------------------------


def test_a_reused_request_id_never_hangs_or_delays_shutdown(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """Two calls in flight with the same JSON-RPC id (one blocked on the index, one not), and a batch
    that repeats an id: each is answered on its own; SIGTERM then ends the server at once."""
    write_two_families(corpus)
    server = start_http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--no-watch",))
    try:
        with ThreadPoolExecutor(2) as pool:
            with index_locked(db_path, corpus, "orchA"):
                slow = pool.submit(post_call, server, "orchA", call_body(LIST_INPUTS, request_id=7))
                _wait_for(lambda: server.detail().json()["calls"]["inFlight"] == 1)
                fast = post_call(server, "orchB", call_body(LIST_CONVERSATIONS, {"scope": "children"}, request_id=7))
                assert fast["id"] == 7  # sent while the other call with id 7 was in flight
                assert [r["conversationId"] for r in tool_payload(fast)[0]["conversations"]] == ["b1"]
            answer = slow.result(timeout=60)
            assert answer["id"] == 7 and tool_payload(answer)[0]["inputs"][0]["content"] == "orchA again"
        batch = httpx2.post(server.url, json=[call_body(LIST_INPUTS, request_id=9), call_body(LIST_INPUTS, request_id=9)],
                            headers={**MCP_HEADERS, **AUTH, SOURCE_HEADER: "orchB"}, timeout=30)  # fmt: skip
        assert batch.status_code < 500, batch.text  # answered (the SDK refuses batches), not left hanging
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=40) == 0
        took = time.monotonic() - started
        print(f"\nbatch with a repeated id: HTTP {batch.status_code}; SIGTERM to exit: {took:.2f} s")
        assert took < 10, "shutdown waited for something"
    finally:
        stop(server)


def test_the_source_header_is_read_per_request_on_one_connection(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """One keep-alive connection, the source header changed (or dropped) from request to request: each
    answer is for that request's header; nothing of an earlier request's source carries over."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN) as server:
        with httpx2.Client(limits=httpx2.Limits(max_connections=1)) as client:
            init = client.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, **AUTH, SOURCE_HEADER: "orchA"}, timeout=30)
            assert init.status_code == 200
            for n, source in enumerate(["orchA", "orchB", None, "orchA", None, "orchB", "orchB", "orchA"] * 3):
                payload, is_error = tool_payload(post_call(server, source, call_body(LIST_INPUTS, request_id=n), client))
                if source is None:
                    assert is_error and payload["error"]["code"] == "missing_source_conversation"
                else:
                    assert not is_error and payload["conversationId"] == source
                    assert [i["content"] for i in payload["inputs"]] == OWN_INPUTS[source]
            assert server.detail().json()["connections"]["evicted"] == 0


def test_stdio_rejects_the_http_limits(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    for option in (("--max-calls", "4"), ("--read-timeout", "3"), ("--unix-socket", str(tmp_path / "s"))):
        result = subprocess.run([CCWEB_INDEX, "serve", *option, "--sessions-dir", str(corpus.path), "--db", str(db_path)],
                                capture_output=True, text=True, env=_clean_env(), timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
        assert result.returncode == 2 and f"{option[0]} only applies to --transport http" in result.stderr, result.stderr


@pytest.mark.skipif(os.name != "posix", reason="unix only")
def test_too_low_a_descriptor_limit_is_a_clear_error(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    result = subprocess.run(
        [*_prlimit_prefix(150, 150), CCWEB_INDEX, "serve", "--transport", "http", "--port", "0",
         "--sessions-dir", str(corpus.path), "--db", str(db_path)],
        capture_output=True, text=True, env=_clean_env(CCWEB_INDEX_TOKEN=TOKEN), timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 1 and "leaves no room for connections" in result.stderr and "Traceback" not in result.stderr


def _modern_call(server: HttpServer, name: str, arguments_json: str) -> httpx2.Response:
    """A tools/call of the 2026-07-28 revision, its arguments as raw JSON text (escapes as written)."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = f'{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{name}","arguments":{arguments_json},"_meta":{json.dumps(meta)}}}}}'
    headers = {**AUTH, "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name, SOURCE_HEADER: "orchA"}  # fmt: skip
    return httpx2.post(server.url, content=body.encode(), headers=headers, timeout=60)


def test_a_lone_surrogate_is_a_parse_error_on_every_transport(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """The SDK's 2026-07-28 entry parses with json.loads, which takes "\\ud800"; its stdio and older HTTP
    transports refuse it. Taken, it reached the filter's query, which SQLite cannot bind, and the index
    went into back-off (/healthz 503). It is a parse error here too, and the index stays in use."""
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token=TOKEN, args=("--no-watch",)) as server:
        for name, arguments in ((LIST_CONVERSATIONS, '{"agent":"\\ud800"}'), ("ccweb_wait_for_conversations", '{"status":"x\\udfff","timeoutSeconds":1}')):
            refused = _modern_call(server, name, arguments)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == -32700, refused.text
        answered = _modern_call(server, LIST_CONVERSATIONS, '{"agent":"CLAUDE \\u00e9"}')  # an escape that parses
        assert answered.status_code == 200 and '"conversations"' in answered.text, answered.text
        assert server.healthz().status_code == 200
    assert "UnicodeEncodeError" not in (tmp_path / "log").read_text()
