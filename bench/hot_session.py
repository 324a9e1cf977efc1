"""One hot giant conversation against every other call (issue 10, item 3).

    python -m bench.hot_session --out DIR [--messages 1000000] [--seconds 60] [--interval 2]
                                [--code TREE] [--label after]

A sessions directory of small conversations (some of them MCP children of `src`) and one big one,
`hot` (--messages messages, about 52 bytes each: 1,000,000 make 52 MB), which a writer process grows
by a few messages every --interval seconds, rewriting the whole file in place as cc-web's
`fs.writeFile` does. Two servers share one index, both with their watcher: `serve` over stdio and
`serve --transport http`. One client per transport, each in a process of its own, calls back to back, in rounds:
`list_conversations` children of `src`, `list_conversations` scope all, `list_user_inputs` of a
small conversation, and `list_user_inputs` of `hot`. Prints one JSON object: each call kind's
latency per transport, the write times, the hot file's parse times in this process (whole, and
resumed from its checkpoint when the code has checkpoints), and the load average.

`--code TREE` runs the servers from another checkout of the repository (e.g. main, for a
"before" figure): `python -m ccweb_index` with TREE importable as `ccweb_index`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from bench.common import ccweb_index_command, clean_env, latency_summary, progress
from bench.stdio_calls import cpu_ns
from ccweb_index.server.tools import INPUTS_LIMIT

HOT = "hot"
SOURCE = "src"
SMALL = 200
APPENDED = 10  # messages per write, one of them a user input
# Each small conversation holds more user inputs, of the hot one's shape, than a default page shows, so
# its `list_user_inputs` answer is the hot one's size and the two differ only by the hot file's work.
SMALL_INPUTS = INPUTS_LIMIT[2] + 5
KINDS = ("children", "all", "inputs_small", "inputs_hot")
# The HTTP server always wants a token (docs/security.md); this one is given, so none is made in the user's config.
TOKEN = "hot-session-bench-token-0123456789"


# --- the corpus ------------------------------------------------------------------------------------


def _message(n: int) -> bytes:
    if n % APPENDED == 0:
        return b'{"id":"u%07d","role":"user","content":"question %d"}' % (n, n)
    return b'{"id":"a%07d","role":"assistant","content":"answer"}' % n


class HotFile:
    """The big session: its messages kept as bytes, the whole file written again at each append."""

    def __init__(self, path: Path, messages: int) -> None:
        self.path = path
        self.count = messages
        self.body = b",".join(_message(n) for n in range(messages))

    def write(self) -> float:
        head = b'{"title":"hot","status":"running","updatedAt":"%s","messages":[' % _iso(time.time()).encode()
        data = head + self.body + b"]}"
        started = time.perf_counter()
        with open(self.path, "r+b" if self.path.exists() else "wb") as f:  # truncate, then write
            f.truncate(0)
            f.write(data)
        return time.perf_counter() - started

    def append(self) -> float:
        self.body += b"," + b",".join(_message(n) for n in range(self.count, self.count + APPENDED))
        self.count += APPENDED
        return self.write()


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def make_corpus(sessions: Path, messages: int) -> HotFile:
    sessions.mkdir(parents=True)
    for n in range(SMALL):
        doc: dict[str, Any] = {
            "title": f"small {n}",
            "updatedAt": _iso(1_780_000_000 + n * 60),
            "messages": [{"id": f"u{k:07d}", "role": "user", "content": f"question {k}"} for k in range(SMALL_INPUTS)],
        }
        if n % 4 == 0:
            doc["createdFrom"] = {"kind": "mcp", "sourceSessionId": SOURCE}
        (sessions / f"s{n:03d}.json").write_text(json.dumps(doc))
    (sessions / f"{SOURCE}.json").write_text(json.dumps({"title": "source", "messages": []}))
    hot = HotFile(sessions / f"{HOT}.json", messages)
    hot.write()
    return hot


# --- the servers and the clients -------------------------------------------------------------------


def server_command(code: str | None) -> tuple[list[str], dict[str, str]]:
    if code is None:
        return [ccweb_index_command()], clean_env()
    # A directory holding `ccweb_index` -> the other checkout, first on the path.
    shim = tempfile.mkdtemp(prefix="ccweb-bench-code-")
    os.symlink(os.path.abspath(code), os.path.join(shim, "ccweb_index"))
    return [sys.executable, "-m", "ccweb_index"], clean_env(PYTHONPATH=shim)


def start_http(command: list[str], env: dict[str, str], sessions: Path, db: Path, log: Path) -> tuple[Any, str]:
    import re
    import subprocess

    import httpx2

    args = [*command, "serve", "--transport", "http", "--port", "0", "--sessions-dir", str(sessions), "--db", str(db)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env={**env, "CCWEB_INDEX_TOKEN": TOKEN}
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"serving MCP on (http://\S+/mcp)", log.read_text(errors="replace"))
        if found:
            try:
                if httpx2.get(found.group(1)[: -len("/mcp")] + "/healthz", timeout=10).status_code == 200:
                    return proc, found.group(1)
            except httpx2.TransportError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the HTTP server did not start:\n{log.read_text(errors='replace')[-3000:]}")


@asynccontextmanager
async def connect(transport: str, command: list[str], env: dict[str, str], sessions: Path, db: Path, url: str, log: Path) -> Any:
    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        if transport == "http":
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"X-Ccweb-Source-Session": SOURCE, "Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(60, read=120))
            )
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        else:
            params = StdioServerParameters(
                command=command[0],
                args=[*command[1:], "serve", "--sessions-dir", str(sessions), "--db", str(db)],
                env={**env, "CCWEB_SOURCE_SESSION_ID": SOURCE},
            )
            errlog = stack.enter_context(open(log, "w"))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        client = await stack.enter_async_context(ClientSession(read, write))
        await client.initialize()
        yield client


CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "children": ("ccweb_list_conversations", {"scope": "children"}),
    "all": ("ccweb_list_conversations", {"scope": "all", "limit": 20}),
    "inputs_small": ("ccweb_list_user_inputs", {"conversationId": "s007"}),
    "inputs_hot": ("ccweb_list_user_inputs", {"conversationId": HOT}),
}


async def drive(client: Any, until: float, warmup: float) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors = 0
    while time.monotonic() < until:
        for kind in KINDS:
            name, arguments = CALLS[kind]
            started = time.monotonic()
            result = await client.call_tool(name, arguments)
            elapsed = time.monotonic() - started
            errors += bool(result.is_error)
            if started >= warmup:
                times[kind].append(elapsed)
    times["errors"] = [float(errors)]
    return times


def _client(transport: str, command: list[str], env: dict[str, str], sessions: Path, db: Path, url: str, work: Path,
            warmup: float, until: float, results: Any) -> None:
    """One client in a process of its own, as an agent's client is: what one client or the writer does
    in Python (a 56 MB copy holds the GIL) must not show up as the other's latency."""

    async def run() -> dict[str, list[float]]:
        async with connect(transport, command, env, sessions, db, url, work / f"{transport}.log") as client:
            await client.call_tool(*CALLS["all"])  # the stdio server's first reconcile
            return await drive(client, until, warmup)

    results.put((transport, asyncio.run(run())))


def _writer(path: Path, messages: int, interval: float, stop: Any, results: Any) -> None:
    """The hot file grows in a process of its own (see `_client`)."""
    hot = HotFile(path, messages)  # the same bytes as the file written at start
    writes = []
    while not stop.wait(interval):
        writes.append(hot.append())
    results.put(("writes", (writes, hot.count)))


def run_clients(hot: HotFile, interval: float, command: list[str], env: dict[str, str], sessions: Path, db: Path,
                url: str, work: Path, seconds: float) -> tuple[dict[str, Any], list[float], int]:
    """Both clients and the writer, each a process; the calls of both clients, the write times, the messages."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results, stop = context.Queue(), context.Event()
    now = time.monotonic()
    warmup, until = now + min(10.0, seconds / 6), now + seconds
    writer = context.Process(target=_writer, args=(hot.path, hot.count, interval, stop, results))
    clients = [
        context.Process(target=_client, args=(transport, command, env, sessions, db, url, work, warmup, until, results))
        for transport in ("stdio", "http")
    ]
    for process in (writer, *clients):
        process.start()
    got = dict(results.get(timeout=seconds + 300) for _ in clients)
    stop.set()
    writes, count = results.get(timeout=60)[1]
    for process in (writer, *clients):
        process.join(60)
    return {transport: got[transport] for transport in ("stdio", "http")}, writes, count


# --- the hot file's own parse -----------------------------------------------------------------------


def parse_times(sessions: Path, repeat: int = 5) -> dict[str, float | None]:
    """Median seconds to load the hot file whole, and resumed from its checkpoint (this code)."""
    from ccweb_index.indexer import load

    whole, resumed = [], []
    loaded = None
    for _ in range(repeat):
        started = time.perf_counter()
        loaded = load.load_session(str(sessions), HOT, 1 << 30)
        whole.append(time.perf_counter() - started)
    checkpoint = None if loaded is None else loaded.checkpoint
    for _ in range(repeat if checkpoint is not None else 0):
        started = time.perf_counter()
        load.load_session(str(sessions), HOT, 1 << 30, checkpoint)
        resumed.append(time.perf_counter() - started)
    return {"whole_s": statistics.median(whole), "resumed_s": statistics.median(resumed) if resumed else None}


OTHER_P99_MAX_MS = 50.0  # issue 10: every call about something else, over each transport
OWN_OVER_INCREMENTAL_MAX = 2.0  # issue 10: the hot session's own list_user_inputs against its incremental parse


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """Issue 10's two targets. The hot session's own call is compared by what it costs beyond the same call
    about a small conversation on the same client (the transport and the SDK, which parse nothing):
    that extra, at the median, against twice the hot file's incremental parse (docs/decisions.md)."""
    resumed_ms = (report["hot_parse"].get("resumed_s") or 0) * 1000
    out: dict[str, Any] = {}
    for transport, calls in report["calls"].items():
        other = max(calls[kind]["p99_ms"] for kind in ("children", "all", "inputs_small"))
        extra = calls["inputs_hot"]["p50_ms"] - calls["inputs_small"]["p50_ms"]
        out[transport] = {
            "other_calls_p99_ms": other, "other_calls_p99_met": other <= OTHER_P99_MAX_MS,
            "own_extra_p50_ms": extra, "incremental_parse_ms": resumed_ms,
            "own_met": extra <= OWN_OVER_INCREMENTAL_MAX * resumed_ms,
        }  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="a new directory for the corpus and the index")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--code", help="run the servers from this checkout instead (a 'before' figure)")
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    sessions, db = args.out / "sessions", args.out / "index.sqlite"
    progress(f"writing {SMALL} small sessions and a {args.messages:,}-message one")
    hot = make_corpus(sessions, args.messages)
    command, env = server_command(args.code)
    import subprocess

    progress("building the index")
    subprocess.run([*command, "build", "--sessions-dir", str(sessions), "--db", str(db)], env=env, check=True)
    server, url = start_http(command, env, sessions, db, args.out / "http-server.log")
    try:
        progress(f"calling for {args.seconds:.0f} s while {HOT} grows every {args.interval} s")
        cpu_before = cpu_ns(server.pid)
        calls, writes, hot.count = run_clients(hot, args.interval, command, env, sessions, db, url, args.out, args.seconds)
        http_server_cpu_s = (cpu_ns(server.pid) - cpu_before) / 1e9
    finally:
        server.terminate()
        server.wait(30)
    report: dict[str, Any] = {
        "label": args.label,
        "hot_bytes": hot.path.stat().st_size,
        "hot_messages": hot.count,
        "writes": len(writes),
        "write_s_median": statistics.median(writes) if writes else None,
        "loadavg": os.getloadavg(),
        "http_server_cpu_s": http_server_cpu_s,  # all its threads, over the run (warm-up included)
        "calls": {
            transport: {kind: latency_summary(times[kind]) for kind in KINDS if times[kind]} | {"errors": times["errors"][0]}
            for transport, times in calls.items()
        },
    }
    if args.code is None:
        report["hot_parse"] = parse_times(sessions)
        report["targets"] = targets(report)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
