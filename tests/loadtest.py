"""The load test of issue #5: concurrent clients while a writer rewrites sessions, every answer checked.

    python tests/loadtest.py writer SPEC_JSON     (used by run(): the writer process)
    python tests/loadtest.py client SPEC_JSON     (used by run(): one client process)

`run()` writes a corpus, starts one shared HTTP server (with its watcher), then client processes
(over HTTP, and over stdio each with its own server, with and without a watcher, all on one index)
and a writer process that rewrites sessions at a fixed rate, atomically or in place at random.

Why the check is sound: the writer only ever moves a session between versions fixed in advance
(`version_doc`), and logs when each write started and ended (CLOCK_MONOTONIC, shared by all
processes). Each client logs when each call started and ended, and its answer. A from-scratch
computation from the files during a call reads each file at some moment of the call, so for each
session the versions the answer may reflect are: the one in place when the call started, and the
new version of every write that overlapped the call. A file caught mid-way through an in-place write
is unreadable, so the contract has its last good indexed version stand in; that may be any version
the session had before (a server without a watcher reads a file only when asked), so for a session
with an in-place write overlapping the call every earlier version is accepted too. The answer must
equal tests/reference.py's for some choice among these versions (every combination is tried).
Answers that fit no combination, tool errors and exceptions are failures.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import reference  # noqa: E402

# conftest and test_contract (the SDK, pytest, Hypothesis: about 2 CPU-s to import) are imported where
# they are used: the writer process needs neither.

INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"
VERSIONS = 4
SOURCES = ["orch0", "orch1", "orch2", "orch3"]


def _command() -> str:
    beside = Path(sys.executable).parent / "ccweb-index"
    return str(beside) if beside.exists() else "ccweb-index"


# The shared server always wants a token; this one is given, so none is made in the user's config.
HTTP_TOKEN = "load-test-token-0123456789abcdef"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    env.update(extra)
    return env


# --- the corpus and its versions ---------------------------------------------------------------------


def session_ids(count: int) -> list[str]:
    ids = list(SOURCES)
    n = 0
    while len(ids) < count:
        ids.append(f"c{n % len(SOURCES)}x{n}" if n % 3 else f"s{n}")
        n += 1
    return ids[:count]


def version_doc(session_id: str, version: int) -> dict[str, Any]:
    """Version `version` of a session. Versions differ in every field a tool returns and in length
    (a leading field of a different size), so that a torn in-place write does not parse."""
    rng = random.Random(f"{session_id}/{version}")
    inputs = [f"{session_id} v{version} input {k} " + "é" * rng.randrange(0, 300) for k in range(1 + (version * 3 + len(session_id)) % 7)]
    messages: list[dict[str, Any]] = []
    for k, text in enumerate(inputs):
        messages.append({"id": f"u{k}", "role": "user", "content": text, "createdAt": f"2026-11-{1 + k:02d}T08:00:00.000Z"})
        messages.append({"id": f"a{k}", "role": "assistant", "content": "ok", "createdAt": f"2026-11-{1 + k:02d}T08:00:30.000Z"})
    doc: dict[str, Any] = {
        "pad": "#" * (version * 37 + 1),
        "title": f"{session_id} version {version}",
        "agent": ["claude", "codex", "Claude", "CODEX"][(version + len(session_id)) % 4],
        "status": ["idle", "Running", "", "waiting"][version % 4],
        "updatedAt": f"2026-12-{1 + rng.randrange(28):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00.000Z",
        "messages": messages,
    }
    match = re.fullmatch(r"c(\d+)x\d+", session_id)
    if match:  # children stay children: createdFrom never changes (see the module docstring)
        doc["createdFrom"] = {"kind": "mcp", "sourceSessionId": SOURCES[int(match.group(1))]}
    return doc


def version_bytes(session_id: str, version: int, mode: str = "mixed") -> bytes:
    if mode == "append":
        return _append_head(session_id) + b"".join(_appended(session_id, k) for k in range(version)) + _append_tail(session_id, version)
    return json.dumps(version_doc(session_id, version), ensure_ascii=False).encode()


# The "append" mode: each session starts over load.CHECKPOINT_MIN_BYTES (so that the index keeps a
# checkpoint and resumes it) and only grows, a message at a time, written in place from where the
# new bytes start (the messages array's end); the fields after the array change with every version.
APPEND_BASE_MESSAGES = 2400


@functools.cache
def _append_head(session_id: str) -> bytes:
    doc = version_doc(session_id, 0)
    head = {k: v for k, v in doc.items() if k not in ("messages", "status", "updatedAt")}
    messages = [
        {"id": f"b{k}", "role": "user" if k % 4 == 0 else "assistant", "createdAt": f"2026-10-{1 + k % 28:02d}T08:00:00.000Z",
         "content": f"{session_id} base {k} " + "x" * 400}
        for k in range(APPEND_BASE_MESSAGES)
    ]  # fmt: skip
    text = json.dumps(head | {"messages": messages}, ensure_ascii=False).encode()
    return text[: text.rindex(b"]")]  # open: the array's "]" and "}" come with each version's tail


@functools.cache
def _appended(session_id: str, k: int) -> bytes:
    role = "user" if k % 2 == 0 else "assistant"
    message = {"id": f"n{k}", "role": role, "content": f"{session_id} appended {k}", "createdAt": "2026-11-30T08:00:00.000Z"}
    return b"," + json.dumps(message, ensure_ascii=False).encode()


def _append_tail(session_id: str, version: int) -> bytes:
    doc = version_doc(session_id, version % VERSIONS)
    return b"]," + json.dumps({"status": doc["status"], "updatedAt": doc["updatedAt"]}).encode()[1:]


def write(directory: Path, session_id: str, version: int, how: str, mode: str = "mixed", data: bytes | None = None) -> None:
    """`how`: atomic (a temporary file renamed over it), inplace (written over, then truncated),
    truncate (Node's fs.writeFile: truncated on open, then written), append (the new bytes written
    from where they differ from the previous version, `version - 1`). `data`: `new_bytes`' answer."""
    data = new_bytes(session_id, version, how, mode) if data is None else data
    target = directory / f"{session_id}.json"
    if how == "atomic":
        tmp = directory / f".{session_id}.json.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    elif how == "truncate":
        with open(target, "wb") as f:
            f.write(data)
    elif how == "append":
        with open(target, "r+b") as f:
            f.seek(_append_head_size(session_id, version - 1))
            f.write(data)
            f.truncate()
    else:
        with open(target, "r+b" if target.exists() else "wb") as f:
            f.write(data)
            f.truncate()


def new_bytes(session_id: str, version: int, how: str, mode: str) -> bytes:
    """What `write` writes: the whole version, or for an append only what follows the previous one."""
    if how == "append":
        return _appended(session_id, version - 1) + _append_tail(session_id, version)
    return version_bytes(session_id, version, mode)


def _append_head_size(session_id: str, appended: int) -> int:
    """Where the first `appended` appended messages end (what versions from `appended` on share)."""
    return len(_append_head(session_id)) + sum(len(_appended(session_id, k)) for k in range(appended))


# Modes as `write` calls them; "mixed" is atomic or in place at random (issue #5's load test).
WRITE_MODES = ("mixed", "atomic", "inplace", "truncate", "append")
# Writes that can be caught half-way (the file is rewritten where it is): the torn-write rule.
TORN_HOWS = frozenset({"inplace", "truncate", "append"})


# --- the writer process ------------------------------------------------------------------------------------


def writer_main(spec: dict[str, Any]) -> None:
    directory = Path(spec["sessions"])
    ids = spec["ids"]
    rng = random.Random(spec["seed"])
    current = {session_id: 0 for session_id in ids}
    period = 1.0 / spec["rate"]
    log = []
    stop = Path(spec["stop_file"])
    next_at = time.monotonic()
    mode = spec["mode"]
    while not stop.exists():
        session_id = rng.choice(ids)
        if mode == "append":
            version = current[session_id] + 1
        else:
            version = rng.choice([v for v in range(VERSIONS) if v != current[session_id]])
        how = rng.choice(["atomic", "inplace"]) if mode == "mixed" else mode
        data = new_bytes(session_id, version, how, mode)  # made before the write is timed
        started = time.monotonic()
        write(directory, session_id, version, how, mode, data)
        ended = time.monotonic()
        current[session_id] = version
        log.append((session_id, version, how, started, ended))
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # behind: do not burst to catch up
    Path(spec["out"]).write_text(json.dumps(log))


# --- the client processes -----------------------------------------------------------------------------------


def plan_calls(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(spec["seed"])
    ids = spec["ids"]
    plan: list[tuple[str, dict[str, Any]]] = []
    for n in range(spec["calls"]):
        kind = n % 6
        if kind == 0:
            plan.append((INPUTS, {}))  # the source's own inputs
        elif kind == 1:
            arguments: dict[str, Any] = {"conversationId": rng.choice(ids)}
            if rng.random() < 0.5:
                arguments["limit"] = rng.randrange(1, 10)
            if rng.random() < 0.5:
                arguments["maxChars"] = rng.choice([50, 200, 1000])
            plan.append((INPUTS, arguments))
        elif kind == 2:
            plan.append((CONVERSATIONS, {"scope": "children", "limit": 50}))
        elif kind == 3:
            plan.append((CONVERSATIONS, {"limit": rng.choice([1, 5, 20])}))
        elif kind == 4:
            plan.append((CONVERSATIONS, {"agent": rng.choice(["claude", "CODEX"]), "limit": 10}))
        else:
            plan.append((CONVERSATIONS, {"status": rng.choice(["idle", "running", "waiting"]), "limit": 100}))
    return plan


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _child_pids() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


async def _client(spec: dict[str, Any]) -> dict[str, Any]:
    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from conftest import answer_of

    @asynccontextmanager
    async def connect() -> AsyncIterator[ClientSession]:
        if spec["transport"] == "http":
            headers = {"X-Ccweb-Source-Session": spec["source"], "Authorization": f"Bearer {HTTP_TOKEN}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
                streamable_http_client(spec["url"], http_client=http) as (read, write_),
                ClientSession(read, write_) as client,
            ):
                await client.initialize()
                yield client
        else:
            command, *prefix = spec["launch"]
            args = [*prefix, "serve", "--sessions-dir", spec["sessions"], "--db", spec["db"], *spec["server_args"]]
            params = StdioServerParameters(command=command, args=args, env=_clean_env(CCWEB_SOURCE_SESSION_ID=spec["source"]))
            async with stdio_client(params) as (read, write_), ClientSession(read, write_) as client:
                await client.initialize()
                yield client

    records = []
    errors: list[str] = []
    rss: dict[str, int | None] = {}
    server_pid = None
    async with connect() as client:
        if spec["transport"] == "stdio" and len(spec["launch"]) == 1:  # else the child is a launcher
            children = _child_pids()
            server_pid = children[0] if children else None
        for n, (name, arguments) in enumerate(plan_calls(spec)):
            if n == spec["warmup"] and server_pid is not None:
                rss["start"] = _rss_kb(server_pid)
            started = time.monotonic()
            try:
                result = await client.call_tool(name, arguments)
                ended = time.monotonic()
                shape, payload = answer_of(result)
                if shape is not None:
                    errors.append(f"{name} {arguments}: {shape}")
                records.append((name, arguments, started, ended, payload, bool(result.is_error)))
            except Exception as exc:
                errors.append(f"{name} {arguments}: {type(exc).__name__}: {exc}")
        if server_pid is not None:
            rss["end"] = _rss_kb(server_pid)
    Path(spec["out"]).write_text(json.dumps({"records": records, "errors": errors, "rss_kb": rss}))
    return {"calls": len(records), "errors": len(errors)}


def client_main(spec: dict[str, Any]) -> None:
    import anyio

    print(json.dumps(anyio.run(_client, spec)))


# --- the oracle ----------------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """Every version each session had, with when it was being written."""

    writes: dict[str, list[tuple[float, float, int, str]]] = field(default_factory=lambda: defaultdict(list))

    def options(self, session_id: str, start: float, end: float, torn: bool = True) -> set[int]:
        """The versions an answer for a call running from `start` to `end` may reflect; with
        torn=False, without the last good versions the torn-write rule lets stand in."""
        writes = self.writes[session_id]
        settled = 0
        seen = {0}
        found: set[int] = set()
        in_place = False
        for w_start, w_end, version, how in writes:
            if w_start >= end:
                break
            seen.add(version)
            if w_end <= start:
                settled = version
            else:  # overlaps the call
                found.add(version)
                in_place = in_place or how in TORN_HOWS
        found.add(settled)
        if in_place and torn:  # torn meanwhile: its last good version, which may be any earlier one
            found |= seen
        return found


class _Facts(dict[tuple[str, int], dict[str, Any]]):
    """reference.session_facts of each (session, version), computed when first asked for."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def __missing__(self, key: tuple[str, int]) -> dict[str, Any]:
        session_id, version = key
        self[key] = facts = reference.session_facts(json.loads(version_bytes(session_id, version, self.mode)), session_id, 0)
        return facts


class Oracle:
    """tests/reference.py over versions held in memory (its file reading stubbed out)."""

    def __init__(self, ids: list[str], placeholder_dir: Path, mode: str = "mixed") -> None:
        self.ids = ids
        self.dir = placeholder_dir
        self.mode = mode
        placeholder_dir.mkdir(parents=True, exist_ok=True)
        for session_id in ids:
            (placeholder_dir / f"{session_id}.json").touch()  # names to list; contents come from below
        self.facts = _Facts(mode)
        self._cache: dict[Any, tuple[dict[str, Any], bool]] = {}

    def _with_state(self, state: dict[str, int], call: Any) -> tuple[dict[str, Any], bool]:
        real = reference.read_session

        def read_session(path: Any, last_good: Any = None) -> Any:
            session_id = Path(path).name[: -len(".json")]
            return self.facts[(session_id, state[session_id])] if session_id in state else None

        reference.read_session = read_session  # type: ignore[assignment]
        try:
            return call()
        finally:
            reference.read_session = real  # type: ignore[assignment]

    def inputs(self, session_id: str, version: int, arguments: dict[str, Any], source: str) -> tuple[dict[str, Any], bool]:
        key = ("i", session_id, version, json.dumps(arguments, sort_keys=True), source)
        if key not in self._cache:
            self._cache[key] = self._with_state(
                {session_id: version}, lambda: reference.list_user_inputs(self.dir, arguments, source)
            )
        return self._cache[key]

    def conversations(self, state: dict[str, int], arguments: dict[str, Any], source: str) -> tuple[dict[str, Any], bool]:
        return self._with_state(state, lambda: reference.list_conversations(self.dir, arguments, source))

    # The same answer as `conversations`, decided for every combination of versions at once.

    def _row(self, session_id: str, version: int) -> dict[str, Any]:
        f = self.facts[(session_id, version)]  # the row as reference.list_conversations builds it
        return {
            "conversationId": f["conversationId"], "title": f["title"], "agent": f["agent"], "status": f["status"],
            "createdAt": reference.format_time(f["createdAtMs"]), "updatedAt": reference.format_time(f["updatedAtMs"]),
            "createdFromKind": f["createdFromKind"],
            "parentConversationId": f["sourceSessionId"] if f["createdFromKind"] == "mcp" else None,
            "userInputCount": len(f["inputs"]),
        }  # fmt: skip

    def _matches(self, session_id: str, version: int, arguments: dict[str, Any], source_id: str | None) -> bool:
        f = self.facts[(session_id, version)]  # reference.list_conversations's filters
        if arguments.get("scope") == "children" and not (f["createdFromKind"] == "mcp" and f["sourceSessionId"] == source_id):
            return False
        agent = reference._filter_value(arguments.get("agent"))
        if agent is not None and (f["agent"] is None or f["agent"].lower() != agent.lower()):
            return False
        status = reference._filter_value(arguments.get("status"))
        return status is None or f["status"].lower() == status.lower()

    def _key(self, session_id: str, version: int) -> tuple[int, str]:
        return (-self.facts[(session_id, version)]["updatedAtMs"], session_id)  # reference's order

    def conversations_possible(self, choices: dict[str, list[int]], arguments: dict[str, Any], source: str,
                               payload: dict[str, Any]) -> str | None:  # fmt: skip
        """None if some choice of one version per session (among `choices`) gives `payload`; else why not.

        Exact, and linear: the sessions in the answer fix their versions (by their rows); each other
        session needs a version that keeps it out (not matching, or, when the answer is full,
        sorting after its last row); and hasMore must be possible (some left-out session can match)
        or avoidable (every left-out session can fail to match).
        """
        source_id = source if reference.is_valid_id(source) else None
        limit = reference.clamp(arguments.get("limit"), *reference.TOOL2_LIMIT)
        header = {"scope": "children" if arguments.get("scope") == "children" else "all",
                  "sourceConversationId": source_id, "limit": limit}  # fmt: skip
        if any(payload.get(k) != v for k, v in header.items()):
            return f"header differs from {header}"
        rows = payload["conversations"]
        if payload["returnedCount"] != len(rows) or len(rows) > limit:
            return "returnedCount or length wrong"
        keys = []
        for row in rows:
            session_id = row["conversationId"]
            fits = [v for v in choices.get(session_id, []) if self._matches(session_id, v, arguments, source_id)
                    and self._row(session_id, v) == row]  # fmt: skip
            if not fits:
                return f"row {session_id} is no version alive during the call ({choices.get(session_id)})"
            keys.append(self._key(session_id, fits[0]))
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            return "rows out of order"
        listed = {row["conversationId"] for row in rows}
        full = len(rows) == limit
        can_have_more = must_have_more = False
        for session_id, versions in choices.items():
            if session_id in listed:
                continue
            out = any(not self._matches(session_id, v, arguments, source_id) for v in versions)
            after = full and any(self._matches(session_id, v, arguments, source_id) and self._key(session_id, v) > keys[-1]
                                 for v in versions)  # fmt: skip
            if not (out or after):
                return f"{session_id} should be in the answer in every version alive ({versions})"
            can_have_more = can_have_more or after
            must_have_more = must_have_more or not out
        if payload["hasMore"] != (payload["nextCursor"] is not None):
            return "hasMore and nextCursor disagree"
        if payload["hasMore"] and not can_have_more:
            return "hasMore, but nothing else can match"
        if not payload["hasMore"] and must_have_more:
            return "not hasMore, but something else must match"
        return None


def check_call(oracle: Oracle, timeline: Timeline, source: str, record: list[Any], torn: bool = True) -> str | None:
    """None if the answer is one a from-scratch computation during the call could give (with
    torn=False: without a last good version standing in for a file caught mid-write)."""
    from test_contract import without_cursor

    name, arguments, started, ended, payload, is_error = record
    if is_error:
        return f"{name} {arguments}: tool error {payload}"
    if name == INPUTS:
        session_id = arguments.get("conversationId", source)
        for version in timeline.options(session_id, started, ended, torn):
            want, want_error = oracle.inputs(session_id, version, arguments, source)
            if not want_error and without_cursor(want) == without_cursor(payload):  # a cursor is opaque
                return None
        return f"{name} {arguments}: no version of {session_id} alive during the call gives {payload}"
    choices = {s: sorted(timeline.options(s, started, ended, torn)) for s in oracle.ids}
    problem = oracle.conversations_possible(choices, arguments, source, payload)
    return None if problem is None else f"{name} {arguments}: {problem}; answer {payload}"


# --- running it all --------------------------------------------------------------------------------------------


@dataclass
class LoadSpec:
    sessions: int = 100
    clients: int = 8
    calls: int = 1000
    rate: float = 100.0  # writes per second
    http_clients: int = 5
    stdio_no_watch: int = 1  # of the stdio clients, how many run their server without a watcher
    warmup: int = 20  # calls before the start RSS is taken
    seed: int = 1
    # One index for every server process (issue #3's deployment), or one per process.
    shared_index: bool = True
    write_mode: str = "mixed"  # WRITE_MODES
    # No server has a watcher (the HTTP one included; `stdio_no_watch` is then moot).
    no_watch: bool = False
    # How the client processes start `ccweb-index` (a command line its arguments follow); empty: the
    # installed command itself.
    launch: tuple[str, ...] = ()


def _start_http(sessions: Path, db: Path, log: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    import httpx2

    command = [_command(), "serve", "--transport", "http", "--port", "0", "--sessions-dir", str(sessions), "--db", str(db), *extra]
    with open(log, "wb") as err:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=_clean_env(CCWEB_INDEX_TOKEN=HTTP_TOKEN))  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        found = re.search(r"serving MCP on (http://\S+/mcp)", log.read_text(errors="replace"))
        if found:
            url = found.group(1)
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(url[: -len("/mcp")] + "/healthz", timeout=10).status_code == 200:
                    return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the HTTP server did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else float("nan")


def run(spec: LoadSpec, workdir: Path | None = None) -> dict[str, Any]:
    """Run the load test; returns the report (failures listed in report["problems"])."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ccweb-load-")))
        sessions = workdir / "sessions"
        sessions.mkdir(parents=True)
        db = workdir / "index.sqlite"
        ids = session_ids(spec.sessions)
        for session_id in ids:
            write(sessions, session_id, 0, "atomic", spec.write_mode)
        build = subprocess.run([_command(), "build", "--sessions-dir", str(sessions), "--db", str(db)],
                               capture_output=True, text=True, env=_clean_env())  # fmt: skip
        if build.returncode != 0:
            raise RuntimeError(build.stderr)
        server, url = _start_http(sessions, db, workdir / "http.log", ["--no-watch"] if spec.no_watch else [])
        procs: list[subprocess.Popen[str]] = []
        try:
            stop_file = workdir / "stop-writing"
            writer_spec = {"sessions": str(sessions), "ids": ids, "seed": spec.seed, "rate": spec.rate,
                           "stop_file": str(stop_file), "out": str(workdir / "writes.json"), "mode": spec.write_mode}  # fmt: skip
            writer = subprocess.Popen([sys.executable, __file__, "writer", json.dumps(writer_spec)], env=_clean_env())
            client_specs = []
            stdio_index = 0
            for n in range(spec.clients):
                http = n < spec.http_clients
                server_args: list[str] = []
                if not http:
                    if spec.no_watch or stdio_index < spec.stdio_no_watch:
                        server_args = ["--no-watch"]
                    stdio_index += 1
                client_db = db if spec.shared_index or http else workdir / f"index-{n}.sqlite"
                client_specs.append({
                    "transport": "http" if http else "stdio", "url": url, "source": SOURCES[n % len(SOURCES)],
                    "ids": ids, "calls": spec.calls, "seed": spec.seed * 1000 + n, "warmup": spec.warmup,
                    "launch": list(spec.launch or [_command()]), "sessions": str(sessions), "db": str(client_db), "server_args": server_args,
                    "out": str(workdir / f"client{n}.json"),
                })  # fmt: skip
            started = time.monotonic()
            for n, client_spec in enumerate(client_specs):
                err = open(workdir / f"client{n}.log", "w")
                stack.callback(err.close)
                procs.append(subprocess.Popen([sys.executable, __file__, "client", json.dumps(client_spec)],
                                              stdout=subprocess.PIPE, stderr=err, text=True, env=_clean_env()))  # fmt: skip
            rss_samples: list[tuple[float, int | None]] = []
            while any(p.poll() is None for p in procs):
                rss_samples.append((time.monotonic() - started, _rss_kb(server.pid)))
                time.sleep(0.5)
            elapsed = time.monotonic() - started
            http_rss_end = _rss_kb(server.pid)
            stop_file.touch()
            writer.wait(60)
            problems: list[str] = []
            for n, proc in enumerate(procs):
                if proc.returncode != 0:
                    problems.append(f"client {n} exited {proc.returncode}: {(workdir / f'client{n}.log').read_text()[-2000:]}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            (workdir / "stop-writing").touch()
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()

        timeline = Timeline()
        for session_id in ids:
            timeline.writes[session_id].append((-math.inf, -math.inf, 0, "initial"))
        writes = json.loads((workdir / "writes.json").read_text())
        for session_id, version, how, w_start, w_end in writes:
            timeline.writes[session_id].append((w_start, w_end, version, how))
        oracle = Oracle(ids, workdir / "placeholders", spec.write_mode)
        latencies: dict[str, list[float]] = defaultdict(list)
        checked = wrong = stale = 0
        rss_stdio = []
        for n, client_spec in enumerate(client_specs):
            out = workdir / f"client{n}.json"
            if not out.exists():
                continue
            result = json.loads(out.read_text())
            problems += [f"client {n}: {e}" for e in result["errors"]]
            if result["rss_kb"]:
                rss_stdio.append({"client": n, "args": client_spec["server_args"], **result["rss_kb"]})
            no_watch = client_spec["server_args"] or (spec.no_watch and client_spec["transport"] == "http")
            transport = client_spec["transport"] + ("-no-watch" if no_watch else "")
            for record in result["records"]:
                latencies[transport].append(record[3] - record[2])
                checked += 1
                problem = check_call(oracle, timeline, client_spec["source"], record, torn=False)
                if problem:
                    # Only a last good version standing in for a file caught mid-write explains it?
                    problem = check_call(oracle, timeline, client_spec["source"], record)
                    stale += problem is None
                if problem:
                    wrong += 1
                    problems.append(f"client {n} ({transport}): {problem}"[:2000])
            if len(result["records"]) != spec.calls:
                problems.append(f"client {n}: {len(result['records'])} calls answered of {spec.calls}")
        http_log = (workdir / "http.log").read_text(errors="replace")
        for marker in ("Traceback", "locked", "ERROR"):
            if marker in http_log:
                problems.append(f"the HTTP server's log says {marker!r}: {http_log[-2000:]}")
        write_seconds = [w[4] - w[3] for w in writes]
        samples = [kb for _, kb in rss_samples if kb]
        warm = samples[min(len(samples) - 1, 2):] if samples else []
        return {
            "spec": spec.__dict__,
            "seconds": round(elapsed, 2),
            "calls": checked,
            "calls_per_second": round(checked / elapsed, 1) if elapsed else None,
            "wrong_answers": wrong,
            # Right only as a last good version standing in for a file caught mid-write (the
            # torn-write rule, docs/reliability.md); wrong answers include every other stale one.
            "stale_torn_answers": stale,
            "problems": problems,
            "writes": len(writes),
            "writes_per_second": round(len(writes) / elapsed, 1) if elapsed else None,
            "in_place_writes": sum(1 for w in writes if w[2] in TORN_HOWS),
            "write_ms_p99": round(_percentile(write_seconds, 99) * 1000, 3),
            "latency_ms": {t: {"p50": round(_percentile(v, 50) * 1000, 1), "p99": round(_percentile(v, 99) * 1000, 1),
                               "n": len(v)} for t, v in sorted(latencies.items())},  # fmt: skip
            "http_server_rss_mb": {
                "start": round(warm[0] / 1024, 1) if warm else None,
                "end": round(http_rss_end / 1024, 1) if http_rss_end else None,
                "max": round(max(samples) / 1024, 1) if samples else None,
            },
            "http_server_rss_trace_mb": [(round(t), round(kb / 1024, 1)) for t, kb in rss_samples[::10] if kb],
            "stdio_server_rss_mb": [
                {"args": r["args"], "start": round((r.get("start") or 0) / 1024, 1), "end": round((r.get("end") or 0) / 1024, 1)}
                for r in rss_stdio
            ],
        }


if __name__ == "__main__":
    role, spec_json = sys.argv[1], sys.argv[2]
    if role == "writer":
        writer_main(json.loads(spec_json))
    elif role == "client":
        client_main(json.loads(spec_json))
    else:
        raise SystemExit(f"unknown role {role!r}")
