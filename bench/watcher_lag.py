"""Watcher lag of the shared HTTP server: write a session in place -> it is on top of scope "all".

    python -m bench.watcher_lag [--sessions 2000] [--scale-bytes 0.05] [--writes 200] [--no-watch]

Generates a corpus (bench.gen_corpus), starts the installed `ccweb-index serve --transport http`
on it with a token, connects the MCP SDK's Streamable HTTP client, then repeatedly rewrites a random
session in place (same inode) with an `updatedAt` newer than every other, and times from the end of
the write until `ccweb_list_conversations {"limit": 1}` answers with that session on top (calling
again if it does not). Prints one JSON object: p50/p99/max in milliseconds, and how many writes were
already visible on the first call after them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import secrets
import shutil
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

from bench.gen_corpus import generate


def _percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _start_server(sessions: Path, db: Path, log: Path, token: str, watch: bool) -> tuple[subprocess.Popen[bytes], str]:
    command = shutil.which("ccweb-index")
    if command is None:
        sys.exit("the ccweb-index command is not installed (pip install -e .)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    env["CCWEB_INDEX_TOKEN"] = token
    args = [command, "serve", "--transport", "http", "--port", "0", "--sessions-dir", str(sessions), "--db", str(db)]
    if not watch:
        args.append("--no-watch")
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    deadline = time.monotonic() + 600
    base = None
    while time.monotonic() < deadline and proc.poll() is None:
        if base is None:
            found = re.search(r"serving MCP on http://127\.0\.0\.1:(\d+)/mcp", log.read_text(errors="replace"))
            if found:
                base = f"http://127.0.0.1:{found.group(1)}"
        if base is not None:
            try:
                if httpx2.get(f"{base}/healthz", timeout=5).status_code == 200:
                    return proc, base
            except httpx2.TransportError:
                pass
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"the server did not become healthy:\n{log.read_text(errors='replace')}")


async def _measure(url: str, token: str, sessions: Path, writes: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    ids = sorted(p.name[: -len(".json")] for p in sessions.glob("*.json"))
    headers = {"Authorization": f"Bearer {token}"}
    lags: list[float] = []
    first_call_hits = 0
    calls = 0
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        await client.list_tools()
        await client.call_tool("ccweb_list_conversations", {"limit": 1})
        for n in range(writes):
            session_id = rng.choice(ids)
            path = sessions / f"{session_id}.json"
            doc = json.loads(path.read_bytes())
            stamp = f"2100-01-{1 + n // 86400:02d}T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
            doc["updatedAt"] = stamp
            data = json.dumps(doc, ensure_ascii=False).encode()
            with open(path, "r+b") as f:  # in place: same inode, as an editor saving over the file would
                f.write(data)
                f.truncate()
            written = time.perf_counter()
            for attempt in range(10_000):
                result = await client.call_tool("ccweb_list_conversations", {"limit": 1})
                calls += 1
                top = (result.structured_content or {}).get("conversations") or [{}]
                if (top[0].get("conversationId"), top[0].get("updatedAt")) == (session_id, stamp):
                    lags.append(time.perf_counter() - written)
                    first_call_hits += attempt == 0
                    break
            else:
                raise SystemExit(f"write {n} never became visible")
            await anyio.sleep(rng.uniform(0, 0.02))
    lags.sort()
    return {
        "writes": writes,
        "p50_ms": round(_percentile(lags, 50) * 1000, 2),
        "p99_ms": round(_percentile(lags, 99) * 1000, 2),
        "max_ms": round(lags[-1] * 1000, 2),
        "mean_ms": round(sum(lags) / len(lags) * 1000, 2),
        "visible_on_first_call": first_call_hits,
        "calls": calls,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.watcher_lag", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--scale-bytes", type=float, default=0.05, help="session size factor for gen_corpus")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-watch", action="store_true", help="run the server without its watcher, for comparison")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ccweb-lag-") as tmp:
        root = Path(tmp)
        sessions = root / "sessions"
        sessions.mkdir()
        summary = generate(sessions, args.sessions, args.seed, args.scale_bytes)
        token = secrets.token_urlsafe(32)
        proc, base = _start_server(sessions, root / "index.sqlite", root / "server.log", token, not args.no_watch)
        try:
            result = anyio.run(_measure, f"{base}/mcp", token, sessions, args.writes, args.seed)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        result = {
            "bench": "watcher_lag",
            "transport": "http",
            "watcher": not args.no_watch,
            "sessions": args.sessions,
            "scale_bytes": args.scale_bytes,
            "corpus_bytes": summary.get("bytes") if isinstance(summary, dict) else None,
            **result,
            "server_exit": code,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
