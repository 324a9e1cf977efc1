"""Watcher lag of the shared HTTP server: write a session in place -> it is on top of scope "all".

    python -m bench.watcher_lag [--sessions 2000] [--scale-bytes 0.05] [--writes 200] [--no-watch]

Generates a corpus (bench.gen_corpus), starts the installed `ccweb-index serve --transport http`
on it with a token, connects the MCP SDK's Streamable HTTP client, then repeatedly rewrites a random
session in place (same inode) with an `updatedAt` newer than every other, and times from the end of
the write until `ccweb_list_conversations {"limit": 1}` answers with that session on top (calling
again if it does not). Prints one JSON object: p50/p99/max in milliseconds, and how many writes were
already visible on the first call after them.

`run_on(sessions, db, ...)` does the same on an existing corpus and index (bench.run uses it) and
puts every rewritten file back to its original bytes afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
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


def _percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _start_server(sessions: Path, db: Path, log: Path, token: str, watch: bool) -> tuple[subprocess.Popen[bytes], str]:
    command = ccweb_index_command()
    env = clean_env(CCWEB_INDEX_TOKEN=token)
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
    proc.wait()
    raise RuntimeError(f"the server did not become healthy:\n{log.read_text(errors='replace')[-4000:]}")


async def _measure(
    url: str, token: str, sessions: Path, writes: int, seed: int, originals: dict[Path, bytes] | None = None
) -> dict[str, Any]:
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
            before = path.read_bytes()
            if originals is not None:
                originals.setdefault(path, before)
            doc = json.loads(before)
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
                raise RuntimeError(f"write {n} never became visible")
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


def restore(originals: dict[Path, bytes]) -> None:
    """Put rewritten files back to their original bytes (in place, as they were rewritten)."""
    for path, data in originals.items():
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()


def run_on(
    sessions: Path, db: Path, work: Path, *, writes: int = 200, seed: int = 0, watch: bool = True
) -> dict[str, Any]:
    """Measure on an existing corpus and index; every rewritten file is restored afterwards."""
    token = secrets.token_urlsafe(32)
    proc, base = _start_server(sessions, db, work / "watcher-lag-server.log", token, watch)
    originals: dict[Path, bytes] = {}
    try:
        result = anyio.run(_measure, f"{base}/mcp", token, sessions, writes, seed, originals)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        restore(originals)
    return {"transport": "http", "watcher": watch, **result, "server_exit": code}


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
        measured = run_on(
            sessions, root / "index.sqlite", root, writes=args.writes, seed=args.seed, watch=not args.no_watch
        )
        result = {
            "bench": "watcher_lag",
            "sessions": args.sessions,
            "scale_bytes": args.scale_bytes,
            "corpus_bytes": summary.get("bytes") if isinstance(summary, dict) else None,
            **measured,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
