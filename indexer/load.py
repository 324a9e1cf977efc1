"""Reading and parsing session files, in this process or spread over worker processes.

Parsing is the bulk of a cold build and holds the GIL, so a large batch is parsed in worker
processes while the parent writes what comes back to SQLite. The workers are plain subprocesses
(`python -m ccweb_index.indexer.load`) speaking pickle over their stdin and stdout: unlike multiprocessing's
spawn they never re-import the caller's main module, and unlike fork they are safe next to the
watcher's and the MCP server's threads. At most _CHUNKS_IN_FLIGHT chunks per worker are in flight, so
memory is bounded by the files being parsed, not by the size of the directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ccweb_index.indexer.files import (
    NotASession,
    Signature,
    TooLarge,
    is_racy,
    lstat_session,
    read_session_file,
)
from ccweb_index.indexer.row import SessionRow
from ccweb_index.indexer.sessionfile import Unreadable, parse_session
from ccweb_index.indexer.stored import stored_head

log = logging.getLogger("ccweb_index")

# Below this much to read, worker processes cost more to start than they save.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_CHUNK_BYTES = 8 * 1024 * 1024
_CHUNK_FILES = 64
_CHUNKS_IN_FLIGHT = 2  # per worker: one parsed while the other's answer is read
WORKER_COMMAND = [sys.executable, "-m", "ccweb_index.indexer.load"]


@dataclass(frozen=True, slots=True)
class Loaded:
    """One file's state, ready for the index."""

    session_id: str
    sig: Signature
    racy: bool
    error: str | None  # None: it parsed, and `row` and `inputs` hold it
    size: int
    row: SessionRow | None = None
    # (seq, message_id, created_at_ms, head, original_chars): plain tuples, which cross the worker pipe cheaply
    inputs: list[tuple[int, str | None, int | None, str, int]] = field(default_factory=list)


class UnreadableLog:
    """Logs a session file as unreadable once per state of it: a racy file is re-read until it
    settles, and must not flood the log. Shared by the indexer and the answers from the files."""

    def __init__(self) -> None:
        self._logged: dict[str, tuple[Signature, str]] = {}

    def note(self, loaded: Loaded) -> None:
        state = (loaded.sig, loaded.error or "")
        if self._logged.get(loaded.session_id) != state:
            self._logged[loaded.session_id] = state
            log.warning("session %s is unreadable: %s", loaded.session_id, loaded.error)

    def readable(self, session_id: str) -> None:
        self._logged.pop(session_id, None)


def load_session(sessions_dir: str, session_id: str, max_bytes: int) -> Loaded | None:
    """Read and parse one session file; None if it is not (or no longer) a session."""
    path = os.path.join(sessions_dir, session_id + ".json")
    try:
        data, sig, looked_at = read_session_file(path, max_bytes)
    except NotASession:
        return None
    except (TooLarge, OSError) as exc:
        st = lstat_session(sessions_dir, session_id)
        if st is None:
            return None
        sig = Signature.of(st)
        reason = str(exc) if isinstance(exc, TooLarge) else f"cannot read: {exc.strerror or exc}"
        return Loaded(session_id, sig, is_racy(sig, time.time_ns()), reason, 0)
    racy = is_racy(sig, looked_at)
    try:
        parsed = parse_session(data)
    except Unreadable as exc:
        return Loaded(session_id, sig, racy, exc.reason, len(data))
    updated = parsed.updated_at_ms if parsed.updated_at_ms is not None else sig.mtime_ns // 1_000_000
    row = SessionRow(
        session_id, parsed.title, parsed.agent, None if parsed.agent is None else parsed.agent.lower(),
        parsed.status, parsed.created_at_ms, updated, parsed.created_from_kind, parsed.created_from_source,
        len(parsed.user_inputs),
    )  # fmt: skip
    # Cut here, in the worker: only what the index keeps crosses the pipe (indexer.stored).
    inputs = [
        (seq, i.message_id, i.created_at_ms, stored_head(i.content), len(i.content))
        for seq, i in enumerate(parsed.user_inputs)
    ]
    return Loaded(session_id, sig, racy, None, len(data), row, inputs)


def _load_chunk(sessions_dir: str, session_ids: list[str], max_bytes: int) -> list[Loaded | None]:
    return [load_session(sessions_dir, session_id, max_bytes) for session_id in session_ids]


# Across the pipe, a Loaded travels as plain tuples: unpickling a dataclass (or a NamedTuple, whose
# pickle calls its class) costs several times more.
def _flatten(item: Loaded | None) -> tuple[object, ...] | None:
    if item is None:
        return None
    sig = (item.sig.ino, item.sig.size, item.sig.mtime_ns, item.sig.ctime_ns)
    row = None if item.row is None else tuple(item.row)
    return (item.session_id, sig, item.racy, item.error, item.size, row, item.inputs)


def _unflatten(flat: tuple[Any, ...] | None) -> Loaded | None:
    if flat is None:
        return None
    session_id, sig, racy, error, size, row, inputs = flat
    return Loaded(session_id, Signature(*sig), racy, error, size, None if row is None else SessionRow._make(row), inputs)


def load_many(
    sessions_dir: str, wanted: list[tuple[str, int]], max_bytes: int
) -> Iterator[tuple[str, Loaded | None]]:
    """Load (session_id, expected size) pairs, in parallel when there is enough to read."""
    total = sum(size for _, size in wanted)
    workers = min(os.cpu_count() or 1, 8)
    if total < PARALLEL_MIN_BYTES or workers < 2 or len(wanted) < 2:
        for session_id, _ in wanted:
            yield session_id, load_session(sessions_dir, session_id, max_bytes)
        return
    yield from _load_in_workers(sessions_dir, list(_chunks(wanted)), max_bytes, workers)


def _load_in_workers(
    sessions_dir: str, chunks: list[list[str]], max_bytes: int, workers: int
) -> Iterator[tuple[str, Loaded | None]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
        for _ in range(min(workers, len(chunks)))
    ]
    queues = {_stdout(proc): (proc, deque[list[str]]()) for proc in procs}
    todo = deque(chunks)

    def retire(fd: int) -> None:
        # A worker died (out of memory, killed): the chunks it held go back to the queue.
        proc, queue = queues.pop(fd)
        proc.kill()
        todo.extendleft(reversed(queue))

    try:
        for fd, (proc, _) in list(queues.items()):
            try:
                _send(proc, (sessions_dir, max_bytes))
            except OSError:
                retire(fd)
        while queues and (todo or any(queue for _, queue in queues.values())):
            for fd, (proc, queue) in list(queues.items()):
                while todo and len(queue) < _CHUNKS_IN_FLIGHT:
                    queue.append(todo.popleft())
                    try:
                        _send(proc, queue[-1])
                    except OSError:
                        retire(fd)
                        break
            # Take results from whichever worker has some, so no worker waits on another.
            ready, _, _ = select.select([fd for fd, (_, queue) in queues.items() if queue], [], [])
            for fd in ready:
                proc, queue = queues[fd]
                try:
                    results = _receive(fd)
                except Exception:  # a worker that died or garbled its answer is replaced by this process
                    retire(fd)
                    continue
                yield from zip(queue.popleft(), map(_unflatten, results))
        while todo:  # no worker left
            chunk = todo.popleft()
            yield from zip(chunk, _load_chunk(sessions_dir, chunk, max_bytes))
    finally:
        for proc in procs:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


# Messages are length-prefixed pickles on unbuffered pipes: `select` on the pipe is then exact (no
# answer can sit unseen in a read-ahead buffer), and a short read is finished, never misparsed.


def _stdout(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None  # started with stdout=PIPE
    return proc.stdout.fileno()


def _send(proc: subprocess.Popen[bytes], message: object) -> None:
    assert proc.stdin is not None
    _write_frame(proc.stdin.fileno(), message)


def _write_frame(fd: int, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int) -> Any:
    size = int.from_bytes(_read_exactly(fd, 8), "little")
    return pickle.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        part = os.read(fd, min(size, 1 << 20))
        if not part:
            raise EOFError("the worker closed its pipe")
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _worker() -> None:
    """A worker's loop: settings first, then chunks of ids in, lists of results out, until EOF."""
    # The protocol owns the real stdout; anything else printed here goes to stderr instead.
    stdin, stdout = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sessions_dir, max_bytes = _receive(stdin)
    while True:
        try:
            chunk = _receive(stdin)
        except EOFError:
            return
        _write_frame(stdout, [_flatten(item) for item in _load_chunk(sessions_dir, chunk, max_bytes)])


def _chunks(wanted: list[tuple[str, int]]) -> Iterator[list[str]]:
    chunk: list[str] = []
    chunk_bytes = 0
    for session_id, size in wanted:
        chunk.append(session_id)
        chunk_bytes += size
        if chunk_bytes >= _CHUNK_BYTES or len(chunk) >= _CHUNK_FILES:
            yield chunk
            chunk, chunk_bytes = [], 0
    if chunk:
        yield chunk


if __name__ == "__main__":
    # Run the imported module's copy, so results pickle as indexer.load.Loaded, not __main__.Loaded.
    from ccweb_index.indexer.load import _worker as worker

    worker()
