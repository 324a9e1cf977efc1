"""Shared test helpers: corpora written in the test, the installed command, a real MCP client."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import zygote
from anyio.from_thread import BlockingPortal, start_blocking_portal
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    # The SDK is imported where a test uses it: the xdist controller, which runs none, need not pay for it.
    from mcp import ClientSession, StdioServerParameters


def _installed_command() -> str | None:
    # The command installed beside the interpreter running the tests, whether or not its venv is on PATH.
    beside = Path(sys.executable).parent / "ccweb-index"
    return str(beside) if beside.exists() else shutil.which("ccweb-index")


CCWEB_INDEX = _installed_command()

# "ci" keeps the suite fast; HYPOTHESIS_PROFILE=long is the thorough run: thousands of examples, and
# the tests marked `slow` at full size (`HYPOTHESIS_PROFILE=long python -m pytest -m slow --timeout=0`).
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "long"
settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "long", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject): two workers per core. Most tests wait on the processes they start or on
    the clock more than they compute; with one worker per core the cores sat idle a fifth of the run
    (docs/decisions.md, "A fast suite")."""
    return 2 * len(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    if CCWEB_INDEX is None:
        raise pytest.UsageError("the ccweb-index command is not installed: run `pip install -e '.[test]'` first")
    # Forked from a preloaded interpreter rather than exec'd: tests/zygote.py says how and why. Here,
    # not at import: a script that imports this module (a load-test client, bench.load's among them)
    # starts its servers as exec does, and `CCWEB_TESTS_START`, which its environment drops, is moot.
    zygote.install(CCWEB_INDEX)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported (the SDK, Hypothesis, every test module) lives to the end of the run:
    # frozen, the collector stops walking it again at each full collection of a worker's heap.
    gc.freeze()


# --- corpora -----------------------------------------------------------------------------------


class Corpus:
    """A sessions directory that a test writes to, the way cc-web would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def file(self, session_id: str) -> Path:
        return self.path / f"{session_id}.json"

    def write(self, session_id: str, doc: Any, *, how: str = "inplace", mtime_ns: int | None = None) -> Path:
        data = doc if isinstance(doc, bytes) else json.dumps(doc, ensure_ascii=False).encode()
        target = self.file(session_id)
        if how == "atomic":
            tmp = self.path / f".{session_id}.json.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, target)
        elif how == "inplace":
            with open(target, "r+b" if target.exists() else "wb") as f:
                f.seek(0)
                f.write(data)
                f.truncate()
        else:
            raise ValueError(how)
        if mtime_ns is not None:
            os.utime(target, ns=(mtime_ns, mtime_ns))
        return target

    def delete(self, session_id: str) -> None:
        self.file(session_id).unlink()


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return Corpus(tmp_path / "sessions")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "index" / "index.sqlite"


def session(
    *inputs: str,
    title: str | None = "t",
    agent: str | None = "claude",
    updated: str | int | None = None,
    created_from: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A minimal cc-web session document with the given user inputs (oldest first)."""
    messages: list[dict[str, Any]] = []
    for n, text in enumerate(inputs):
        minute = f"{n % 60:02d}"
        messages.append({"id": f"u{n}", "role": "user", "content": text, "createdAt": f"2026-11-29T08:{minute}:00.000Z"})
        messages.append({"id": f"a{n}", "role": "assistant", "content": "ok", "createdAt": f"2026-11-29T08:{minute}:30.000Z"})
    doc: dict[str, Any] = {"messages": messages, **extra}
    if title is not None:
        doc["title"] = title
    if agent is not None:
        doc["agent"] = agent
    if updated is not None:
        doc["updatedAt"] = updated
    if created_from is not None:
        doc["createdFrom"] = created_from
    return doc


def snapshot(directory: Path) -> dict[str, tuple[Any, ...]]:
    """Everything a write would change: names, types, inodes, sizes, times (ctime too) and contents."""
    result: dict[str, tuple[Any, ...]] = {}
    for root, dirs, files in os.walk(directory):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            digest = None
            if stat.S_ISREG(st.st_mode) and os.access(path, os.R_OK):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            result[os.path.relpath(path, directory)] = (
                st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest
            )
    st = os.stat(directory)
    result["."] = (st.st_mode, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    return result


# --- the command, in-process -----------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """`ccweb-index ARGS`, run in this process through click's CliRunner: the same commands without
    an interpreter start-up each. No CCWEB_ variable of the test run's environment is seen, only
    those in `env`. An exception the command does not turn into a message fails the test with its
    traceback (a subprocess would have printed it). Commands that need a process of their own
    (`serve`, a `build` killed half-way, `watch` until a signal) are started as subprocesses."""
    from ccweb_index.server.cli import main

    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith("CCWEB_")}
    overrides.update(env or {})
    result = CliRunner().invoke(main, list(args), env=overrides, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


# --- a real MCP client over stdio, usable from synchronous tests ---------------------------------


def answer_of(result: Any) -> tuple[str | None, Any]:
    """(what is wrong with the result's shape or None, its JSON answer) for a `CallToolResult`.

    A success carries the answer twice: as its one text block and as `structuredContent`, equal. An
    error (`isError`) carries it only as text: no `structuredContent`, which clients would check
    against the success schema (docs/decisions.md).
    """
    if len(result.content) != 1 or result.content[0].type != "text":
        return f"expected one text block, got {result.content!r}", None
    try:
        payload = json.loads(result.content[0].text)
    except ValueError:
        return f"the text block is not JSON: {result.content[0].text[:200]!r}", None
    if result.is_error:
        if result.structured_content is not None:
            return "a tool error carries structuredContent", payload
        if not isinstance(payload, dict) or set(payload) != {"error"}:
            return f"a tool error's text is not an error object: {payload!r}", payload
    elif payload != result.structured_content:
        return "text content and structuredContent differ", payload
    return None, payload



class StdioClient:
    """A server driven by the SDK's ClientSession: `ccweb-index serve` over stdio (`stdio_client_for`),
    or the same server in this process (`memory_client_for`)."""

    def __init__(self, portal: BlockingPortal, session: ClientSession) -> None:
        self._portal = portal
        self.session = session

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
        result = self._portal.call(self.session.call_tool, name, arguments or {})
        problem, payload = answer_of(result)
        assert problem is None, problem
        return payload, bool(result.is_error)

    def list_tools(self) -> Any:
        return self._portal.call(self.session.list_tools)


@contextmanager
def stdio_client_for(
    sessions_dir: Path,
    db: Path,
    *,
    source: str | None = None,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    errlog: Any = None,
    prefix: tuple[str, ...] = (),
) -> Iterator[StdioClient]:
    """`errlog`: a file for the server's stderr (default: the tests' stderr). `prefix`: a command that
    runs the server (e.g. one that drops privileges or sets a resource limit, then execs the rest)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    environment.update(env or {})
    if source is not None:
        environment["CCWEB_SOURCE_SESSION_ID"] = source
    command = [*prefix, CCWEB_INDEX, "serve", "--sessions-dir", str(sessions_dir), "--db", str(db), *args]
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=command[0], args=command[1:], env=environment)
    with start_blocking_portal() as portal:
        # One task owns the whole client lifetime (anyio cancel scopes must exit where they entered).
        with portal.wrap_async_context_manager(_connected(params, errlog)) as client:
            yield StdioClient(portal, client)


@asynccontextmanager
async def _connected(params: StdioServerParameters, errlog: Any = None) -> AsyncIterator[ClientSession]:
    from mcp import ClientSession, stdio_client

    async with stdio_client(params, errlog=errlog or sys.stderr) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


@contextmanager
def memory_client_for(
    sessions_dir: Path, db: Path, *, source: str | None = None, watch: bool = True, max_waits: int | None = None
) -> Iterator[StdioClient]:
    """The server `serve` runs (server.app.build_server over a LazyService, as on stdio), in this
    process, reached by the SDK's ClientSession through the SDK's in-memory transport. For tests whose
    subject is the answers, not the transport or the process: no interpreter start-up (about a second
    of CPU for the SDK's imports) per test. The stdio and HTTP servers themselves are tested as
    processes, and tests/interop drives them with other clients, for every tool case."""
    from mcp import ClientSession
    from mcp.client._memory import InMemoryTransport

    from ccweb_index.server.app import LazyService, build_server
    from ccweb_index.server.service import Service
    from ccweb_index.server.tools import DEFAULT_MAX_WAITS
    from ccweb_index.server.waits import WaitRoom

    def open_service() -> Service:
        service = Service(sessions_dir, db, watch=watch)
        service.start_in_background()
        return service

    service = LazyService(open_service)
    waits = WaitRoom(DEFAULT_MAX_WAITS if max_waits is None else max_waits)
    server = build_server(service, lambda ctx: source, waits, in_thread=False)

    @asynccontextmanager
    async def connected() -> AsyncIterator[ClientSession]:
        async with InMemoryTransport(server) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            yield client

    try:
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(connected()) as client:
            yield StdioClient(portal, client)
    finally:
        service.close()


def hold_the_reader(watcher: Any, session_id: str) -> tuple[threading.Event, threading.Event]:
    """Make the watcher's reader thread stop inside its handling of the next change of `session_id`,
    before the dirty set has it, until `release` is set; `handling` says it has stopped there."""
    handling, release = threading.Event(), threading.Event()
    add = watcher.dirty.add

    def slow_add(changed: str, *, completed: bool = False) -> None:
        if changed == session_id and not release.is_set():
            handling.set()
            release.wait(10)
        add(changed, completed=completed)

    watcher.dirty.add = slow_add
    return handling, release


@contextmanager
def index_held_elsewhere(svc: Any) -> Iterator[None]:
    """Another thread of the service's process holds its index (e.g. a long initial build) until the
    block ends: a call that waits for it longer than `from_index.LOCK_WAIT_SECONDS` answers from the
    files."""
    inside, release = threading.Event(), threading.Event()

    def hold_the_index() -> None:
        with svc.handle.lock:
            inside.set()
            assert release.wait(30)

    holder = threading.Thread(target=hold_the_index)
    holder.start()
    try:
        assert inside.wait(30)
        yield
    finally:
        release.set()
        holder.join(30)


def client_launch(*args: str) -> list[str]:
    """The command line a client process (the TypeScript SDK, the Inspector, a Python SDK client
    process) is given to start `ccweb-index *args`: forked by this worker's zygote too, through a
    small launcher (tests/zygote.py, launch_command)."""
    assert CCWEB_INDEX is not None, "ccweb-index is not installed"
    return [*zygote.launch_command(CCWEB_INDEX), *args]


def server_pid(db: Path) -> int:
    """The pid of the newest `ccweb-index serve` this worker started on index `db` (a stdio server
    started through the SDK's client, which does not show its process)."""
    for pid, argv in reversed(zygote.started):
        if "serve" in argv and os.fsdecode(db) in argv:
            return pid
    raise AssertionError(f"no server on {db} was started")


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
