"""Wake-up latency of ccweb_wait_for_conversations: write a session -> a waiting client has its answer.

    python -m bench.wait_latency [--sessions 2000] [--scale-bytes 0.05] [--writes 200] [--daemon]

Generates a corpus (bench.gen_corpus), starts the installed `ccweb-index serve --transport http` on
it (with its watcher), connects the MCP SDK's Streamable HTTP client, and repeatedly: starts a wait
(`scope: "all"`, `since` the last changeToken), lets it settle into its sleep, rewrites a random
session in place, and times from the end of the write until the wait's answer reaches the client
(it must name that session in `changed`). `--daemon` also runs a `ccweb-index watch` daemon on the
same index, which races the server to index each write (the server then learns of it from the
index's change sequence). Prints one JSON object: p50/p99/max in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench.common import ccweb_index_command, clean_env
from bench.gen_corpus import generate
from bench.watcher_lag import _percentile, _start_server, restore

WAIT = "ccweb_wait_for_conversations"
# Between starting a wait and writing: the wait has made its first look and sleeps.
SETTLE_SECONDS = 0.1


async def _wait_for(client: ClientSession, since: str, session_id: str, answers: list[tuple[float, dict[str, Any]]]) -> None:
    """Wait until an answer names `session_id`. An earlier write may still report a last state of its
    file (an in-place write is two changes when the watcher reads between the write and the
    truncate): then wait again."""
    while True:
        result = await client.call_tool(WAIT, {"since": since, "limit": 1, "timeoutSeconds": 60})
        answers.append((time.perf_counter(), result.structured_content or {}))
        answer = answers[-1][1]
        if {"conversationId": session_id, "deleted": False} in answer.get("changed", []):
            return
        if answer.get("timedOut", True):
            raise RuntimeError(f"the wait for {session_id} timed out: {answer}")
        since = answer["changeToken"]


async def _measure(url: str, token: str, sessions: Path, writes: int, seed: int, originals: dict[Path, bytes]) -> dict[str, Any]:
    rng = random.Random(seed)
    ids = sorted(p.name[: -len(".json")] for p in sessions.glob("*.json"))
    lags: list[float] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        await client.list_tools()
        change_token = (await client.call_tool("ccweb_list_conversations", {"limit": 1})).structured_content["changeToken"]
        for n in range(writes):
            session_id = rng.choice(ids)
            path = sessions / f"{session_id}.json"
            before = path.read_bytes()
            originals.setdefault(path, before)
            doc = json.loads(before)
            doc["updatedAt"] = f"2100-01-01T00:00:{n % 60:02d}.{n // 60:03d}Z"
            answers: list[tuple[float, dict[str, Any]]] = []

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_wait_for, client, change_token, session_id, answers)
                await anyio.sleep(SETTLE_SECONDS)
                with open(path, "r+b") as f:  # in place: same inode, as cc-web rewrites a session
                    f.write(json.dumps(doc, ensure_ascii=False).encode())
                    f.truncate()
                written = time.perf_counter()
            answered_at, answer = answers[-1]
            lags.append(answered_at - written)
            change_token = answer["changeToken"]
    lags.sort()
    return {
        "writes": writes,
        "p50_ms": round(_percentile(lags, 50) * 1000, 2),
        "p99_ms": round(_percentile(lags, 99) * 1000, 2),
        "max_ms": round(lags[-1] * 1000, 2),
        "mean_ms": round(sum(lags) / len(lags) * 1000, 2),
    }


def run_on(sessions: Path, db: Path, work: Path, *, writes: int = 200, seed: int = 0, daemon: bool = False) -> dict[str, Any]:
    """Measure on an existing corpus and index; every rewritten file is restored afterwards."""
    token = secrets.token_urlsafe(32)
    proc, base = _start_server(sessions, db, work / "wait-latency-server.log", token, True)
    watcher = None
    if daemon:
        command = [ccweb_index_command(), "watch", "--sessions-dir", str(sessions), "--db", str(db)]
        watcher = subprocess.Popen(command, stderr=open(work / "wait-latency-daemon.log", "wb"), env=clean_env())
    originals: dict[Path, bytes] = {}
    try:
        result = anyio.run(_measure, f"{base}/mcp", token, sessions, writes, seed, originals)
    finally:
        for process in filter(None, (proc, watcher)):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        restore(originals)
    return {"transport": "http", "daemon": daemon, **result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.wait_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--scale-bytes", type=float, default=0.05, help="session size factor for gen_corpus")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--daemon", action="store_true", help="also run a watch daemon on the same index")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ccweb-wait-") as tmp:
        root = Path(tmp)
        sessions = root / "sessions"
        sessions.mkdir()
        generate(sessions, args.sessions, args.seed, args.scale_bytes)
        started = time.perf_counter()
        measured = run_on(sessions, root / "index.sqlite", root, writes=args.writes, seed=args.seed, daemon=args.daemon)
    result = {"bench": "wait_latency", "sessions": args.sessions, **measured, "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
