"""The shared server under each flood of issue #11, with its default limits: what it holds, its memory,
and how long a legitimate client waits for an answer meanwhile (target: under 1 s).

    python -m bench.flood [--idle 1100] [--slowloris 200] [--seconds 10]

Floods, each on loopback and bounded: 1,100 idle connections (the issue's lock-out), slowloris
connections trickling a header line every 5 s, and one client calling with 64 calls in flight at a
time. During each, another client opens a connection and calls `ccweb_list_user_inputs` once a
quarter second; its times, the server's connections held and its RSS are printed as a table row
(docs/reliability.md).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2

from bench.common import ccweb_index_command, clean_env, latency_summary, proc_status_mb, progress

TOKEN = "bench-token-0123456789abcdef0123"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json", "Content-Type": "application/json"}


def _call(source: str, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "ccweb_list_user_inputs", "arguments": {}}}  # fmt: skip


def start(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    sessions = root / "sessions"
    sessions.mkdir()
    for n in range(50):
        doc = {"title": f"s{n}", "agent": "claude", "updatedAt": "2026-11-01T00:00:00Z",
               "messages": [{"id": "u", "role": "user", "content": f"input of s{n}", "createdAt": "2026-11-01T00:00:00Z"}]}  # fmt: skip
        (sessions / f"s{n}.json").write_text(json.dumps(doc))
    log = root / "server.log"
    proc = subprocess.Popen(
        [ccweb_index_command(), "serve", "--transport", "http", "--port", "0", "--sessions-dir", str(sessions),
         "--db", str(root / "index.sqlite")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=clean_env(CCWEB_INDEX_TOKEN=TOKEN),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (found := re.search(r"serving MCP on http://127\.0\.0\.1:(\d+)/mcp", log.read_text())):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    port = int(found.group(1))
    while httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code != 200:
        time.sleep(0.05)
    return proc, port


def legit_client(port: int, seconds: float) -> list[float]:
    """A fresh connection per call (the worst case: it must get in past the flood), 4 calls a second."""
    times = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        with httpx2.Client() as client:
            response = client.post(f"http://127.0.0.1:{port}/mcp", json=_call("s1"),
                                   headers={**HEADERS, "X-Ccweb-Source-Session": "s1"}, timeout=60)  # fmt: skip
        times.append(time.monotonic() - started)
        assert response.status_code == 200 and "input of s1" in response.text, response.text
        time.sleep(0.25)
    return times


def detail(port: int) -> dict[str, Any]:
    return httpx2.get(f"http://127.0.0.1:{port}/healthz?detail=1", headers=HEADERS, timeout=30).json()


def idle_flood(port: int, count: int, stop: threading.Event) -> None:
    socks = []
    for _ in range(count):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        except OSError:
            break
    stop.wait()
    for sock in socks:
        sock.close()


def slowloris(port: int, count: int, stop: threading.Event) -> None:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    n = 0
    while not stop.wait(5):
        n += 1
        for sock in socks:
            try:
                sock.sendall(f"X-Trickle-{n}: x\r\n".encode())
            except OSError:
                pass
    for sock in socks:
        sock.close()


def call_flood(port: int, in_flight: int, stop: threading.Event) -> None:
    with httpx2.Client(limits=httpx2.Limits(max_connections=in_flight)) as client, ThreadPoolExecutor(in_flight) as pool:

        def one(n: int) -> None:
            client.post(f"http://127.0.0.1:{port}/mcp", json=_call("s0", n),
                        headers={**HEADERS, "X-Ccweb-Source-Session": "s0"}, timeout=60)  # fmt: skip

        while not stop.is_set():
            list(pool.map(one, range(in_flight)))


def measure(port: int, pid: int, name: str, flood: Callable[[threading.Event], None], seconds: float) -> dict[str, Any]:
    progress(f"flood: {name}")
    rss_before = proc_status_mb(pid)["rss_mb"]
    stop = threading.Event()
    flooder = threading.Thread(target=flood, args=(stop,))
    flooder.start()
    time.sleep(1.0)  # let the flood build up
    times = legit_client(port, seconds)
    doc = detail(port)
    rss_during = proc_status_mb(pid)["rss_mb"]
    stop.set()
    flooder.join()
    summary = latency_summary(times)
    return {"flood": name, "connections_held": doc["connections"]["open"], "cap": doc["connections"]["max"],
            "evicted": doc["connections"]["evicted"], "timed_out": doc["connections"]["timedOut"],
            "calls_refused": doc["calls"]["refused"], "rss_mb": (round(rss_before, 1), round(rss_during, 1)),
            "client_ms": {k: summary[k] for k in ("p50_ms", "max_ms", "n") if k in summary}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--slowloris", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ccweb-flood-") as tmp:
        proc, port = start(Path(tmp))
        try:
            rows = [
                measure(port, proc.pid, "none", lambda stop: stop.wait(), args.seconds),
                measure(port, proc.pid, f"{args.idle} idle connections", lambda stop: idle_flood(port, args.idle, stop), args.seconds),
                measure(port, proc.pid, f"{args.slowloris} slowloris (a line / 5 s)", lambda stop: slowloris(port, args.slowloris, stop), args.seconds),
                measure(port, proc.pid, "one client, 64 calls in flight", lambda stop: call_flood(port, 64, stop), args.seconds),
            ]  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
