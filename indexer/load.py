"""Reading and parsing session files, in this process or spread over worker processes.

Parsing is the bulk of a cold build and holds the GIL, so a large batch is parsed in worker
processes while the parent writes what comes back to SQLite. The workers are plain subprocesses
(`python -m ccweb_index.indexer.load`) speaking pickle over their stdin and stdout: unlike multiprocessing's
spawn they never re-import the caller's main module, and unlike fork they are safe next to the
watcher's and the MCP server's threads. There is at most one worker per core.

Memory is bounded by the bytes in flight, not by the size of the directory or of a file: chunks go
to the workers while the bytes of the files sent and not yet answered stay within
`PARSE_BYTES_IN_FLIGHT` (a chunk is always sent when nothing else is in flight, so a file larger
than the budget is still read), and a file larger than a chunk is parsed alone, one at a time.

A file parsed before keeps a checkpoint in the index (`sessionfile.Checkpoint`); when it has only
grown, it is resumed from there in this process (cheap: the read and the checksum run without the
GIL). A file to be parsed whole that is large enough to hold the GIL for long goes to a worker even
alone, so a big conversation's re-index never stalls the calls this process is answering.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, field
from queue import SimpleQueue
from typing import Any

from ccweb_index.indexer.files import (
    NotASession,
    Signature,
    TooLarge,
    is_transient,
    lstat_session,
    racy_mark,
    read_session_ends,
    read_session_file,
    read_session_parts,
)
from ccweb_index.indexer.row import SessionRow
from ccweb_index.indexer.sessionfile import (
    ENDS_BYTES,
    Checkpoint,
    ParsedSession,
    Unreadable,
    cut_short,
    messages_offset,
    parse_session,
    region_size,
    resume_parts,
    resume_session,
)
from ccweb_index.indexer.stored import stored_head_utf8
from ccweb_index.process import why_not

log = logging.getLogger("ccweb_index")

# Below this much to read, worker processes cost more to start than they save.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
# A file this large, parsed whole, would hold the GIL for a good part of a second: a worker parses it.
ALONE_MIN_BYTES = 16 * 1024 * 1024
# The default cap on the bytes of the files handed to workers and not yet answered.
PARSE_BYTES_IN_FLIGHT = 256 * 1024 * 1024
# Files this large get a checkpoint, so that their next version can be resumed; smaller ones parse
# whole in a few milliseconds.
CHECKPOINT_MIN_BYTES = 1024 * 1024
# A file that could not be resumed and changed since it was read is read again, up to this many
# times this far apart, before it is parsed whole: a rewrite of a big file takes a while.
_SETTLE_ATTEMPTS = 10
_SETTLE_SECONDS = 0.02
# Without waiting, how long a file that could not be resumed is given to show that it is moving.
_GLANCE_SECONDS = 0.001
# A resume reads this much of the file's start to find its messages array; a header longer than
# that (never seen from cc-web) makes the file parse whole.
_HEAD_BYTES = 64 * 1024
_CHUNK_BYTES = 8 * 1024 * 1024
_CHUNK_FILES = 64
# Per worker: enough queued that it goes on parsing while the caller writes a batch to the index.
_CHUNKS_IN_FLIGHT = 8
# Near the end a worker holds no more than its share of the chunks left, and at least this many: a
# full queue handed out then left one worker parsing it alone while the others had nothing to do.
_CHUNKS_NEAR_END = 2
WORKER_COMMAND = [sys.executable, "-m", "ccweb_index.indexer.load"]
# A worker's large allocations (a file's bytes, the text of its UTF-8 check) live for one file. With
# glibc's defaults many of them go back to the kernel when freed and fault in again, page by page:
# a second of the workers' system time in a build of issue 12's long corpus (docs/benchmarks.md,
# "The workers' allocator"). These keep blocks up to the first size in the heap, and give back the
# free top of the heap only beyond the second (free space below blocks in use stays, as it does
# with the defaults). A value the user's environment sets wins; other C libraries ignore both.
_WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(16 << 20), "MALLOC_TRIM_THRESHOLD_": str(32 << 20)}


@dataclass(frozen=True, slots=True)
class Loaded:
    """One file's state, ready for the index."""

    session_id: str
    sig: Signature
    racy: int  # files.racy_mark: 0 when settled, else when the racy read began
    error: str | None  # None: it parsed, and `row` and `inputs` hold it
    size: int
    row: SessionRow | None = None
    # (seq, message_id, created_at_ms, head, original_chars): plain tuples, which cross the worker pipe
    # cheaply. The head is UTF-8 (indexer.stored.stored_head_utf8), as the index keeps it.
    inputs: list[tuple[int, str | None, int | None, bytes, int]] = field(default_factory=list)
    # The file could not be read now (files.is_transient): `error` says why, `sig` means nothing,
    # and nothing of it may be recorded. It stays due.
    transient: bool = False
    checkpoint: Checkpoint | None = None
    # Resumed from this checkpoint of the indexed version: `inputs` are only those from seq
    # `base.inputs` on, and the index's rows before them stay.
    base: Checkpoint | None = None
    # Caught being written, by a look that need not wait for it (`Wanted.patient`): like a
    # transient failure, nothing of it may be recorded; its next event brings it back.
    writing: bool = False


@dataclass(frozen=True, slots=True)
class Wanted:
    """A file to load: its size when looked at, and the checkpoint of its indexed version, if any."""

    session_id: str
    size: int
    resume_from: Checkpoint | None = None
    # False: the index's version is known to be the file's latest complete one (refresh.py), so a
    # file caught being written is not waited for: `Loaded.writing` comes back at once.
    patient: bool = True


# A session that keeps changing while unreadable (growing past the size limit, rewritten in a loop)
# is logged at most this often, with the count of the states not logged.
UNREADABLE_LOG_SECONDS = 60.0


@dataclass(slots=True)
class _Logged:
    state: tuple[Signature, str] | None  # None: readable since
    at: float  # when the last line about it was logged
    unlogged: int = 0  # unreadable states seen since then and not logged


class UnreadableLog:
    """Logs a session file as unreadable: at once when it becomes so, then at most once per
    UNREADABLE_LOG_SECONDS while it keeps changing, with a count, so that neither a racy file read
    again and again nor one rewritten a thousand times a minute floods the log. Shared by the
    indexer and the answers from the files. A failure that is not the file's own (transient) is
    logged by the indexer, as a fault of the process (refresh.py)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._files: dict[str, _Logged] = {}

    def note(self, loaded: Loaded, *, stand_in: bool = False) -> None:
        """`stand_in`: its last good version answers meanwhile (the log line says so)."""
        if loaded.transient:
            return
        state, now = (loaded.sig, loaded.error or ""), self._clock()
        with self._lock:
            entry = self._files.get(loaded.session_id)
            if entry is not None and entry.state == state:
                return
            if entry is not None and now - entry.at < UNREADABLE_LOG_SECONDS:
                entry.state, entry.unlogged = state, entry.unlogged + 1
                return
            unlogged = 0 if entry is None else entry.unlogged
            self._files[loaded.session_id] = _Logged(state, now)
        more = f" ({unlogged} more unreadable states of it were not logged)" if unlogged else ""
        kept = "; its last good version stands in" if stand_in else ""
        log.warning("session %s is unreadable: %s%s%s", loaded.session_id, loaded.error, kept, more)

    def readable(self, session_id: str) -> None:
        # The time of the last line is kept for a while: a file flapping between readable and not
        # (torn reads under a writer) is still logged once per UNREADABLE_LOG_SECONDS.
        with self._lock:
            entry = self._files.get(session_id)
            if entry is None:
                return
            if self._clock() - entry.at >= UNREADABLE_LOG_SECONDS:
                del self._files[session_id]
            else:
                entry.state = None


@dataclass(frozen=True, slots=True)
class NotResumed:
    """The file cannot be resumed from its checkpoint; it must be parsed whole. `size`: as read
    (the size seen when it was chosen may be that of a moment in the middle of a rewrite)."""

    size: int


def load_session(
    sessions_dir: str, session_id: str, max_bytes: int, resume_from: Checkpoint | None = None
) -> Loaded | None:
    """Read and parse one session file; None if it is not (or no longer) a session.
    `resume_from`: the checkpoint of the indexed version, tried first."""
    loaded = _load(sessions_dir, session_id, max_bytes, resume_from, whole=True)
    assert not isinstance(loaded, NotResumed)  # parsed whole when it could not be resumed
    return loaded


def _load(
    sessions_dir: str, session_id: str, max_bytes: int, resume_from: Checkpoint | None, *, whole: bool, patient: bool = True
) -> Loaded | None | NotResumed:
    """`load_session`; with whole=False, NOT_RESUMED instead of parsing a file that cannot be resumed;
    with patient=False, a file that cannot be resumed because it is being written is not waited for."""
    path = os.path.join(sessions_dir, session_id + ".json")
    parsed: ParsedSession | None = None
    attempts = _SETTLE_ATTEMPTS if patient else 1
    for attempt in range(attempts if resume_from is not None else 0):
        assert resume_from is not None
        try:
            parsed, sig, looked_at, size = _resume(path, max_bytes, resume_from)
        except NotASession:
            return None
        except (TooLarge, OSError, MemoryError) as exc:
            return _not_read(sessions_dir, session_id, exc)
        if parsed is not None or (patient and attempt == attempts - 1):
            break
        time.sleep(_SETTLE_SECONDS if patient else _GLANCE_SECONDS)
        if not _moved_on(sessions_dir, session_id, sig):
            break
        if not patient:
            return Loaded(session_id, sig, 0, "being written", size, writing=True)
    base = resume_from if parsed is not None else None
    if parsed is None:
        if not whole and resume_from is not None:
            return NotResumed(size)
        try:
            data, sig, looked_at = read_session_file(path, max_bytes)
        except NotASession:
            return None
        except (TooLarge, OSError, MemoryError) as exc:
            return _not_read(sessions_dir, session_id, exc)
        size = len(data)
        try:
            parsed = parse_session(data, checkpoint_from=CHECKPOINT_MIN_BYTES)
        except Unreadable as exc:
            return Loaded(session_id, sig, racy_mark(sig, looked_at), exc.reason, size)
        except MemoryError as exc:
            return _not_now(session_id, exc)
        del data
    racy = racy_mark(sig, looked_at)
    updated = parsed.updated_at_ms if parsed.updated_at_ms is not None else sig.mtime_ns // 1_000_000
    first = parsed.inputs_before
    row = SessionRow(
        session_id, parsed.title, parsed.agent, None if parsed.agent is None else parsed.agent.lower(),
        parsed.status, parsed.created_at_ms, updated, parsed.created_from_kind, parsed.created_from_source,
        first + len(parsed.user_inputs),
    )  # fmt: skip
    # Cut here, in the worker: only what the index keeps crosses the pipe (indexer.stored). A resumed
    # parse holds only the inputs after the checkpoint's, numbered on from there.
    inputs = [
        (seq, i.message_id, i.created_at_ms, stored_head_utf8(i.content), len(i.content))
        for seq, i in enumerate(parsed.user_inputs, first)
    ]
    return Loaded(session_id, sig, racy, None, size, row, inputs, checkpoint=parsed.checkpoint, base=base)


def _resume(path: str, max_bytes: int, cp: Checkpoint) -> tuple[ParsedSession | None, Signature, int, int]:
    """(the file resumed from `cp`, or None; the signature and time of the read; the bytes read).
    Only the header, the prefix's region and what follows the cut are read (sessionfile.Checkpoint);
    a checkpoint without a region is checked against the whole prefix, so the file is read whole."""
    if cp.region is None:
        data, sig, looked_at = read_session_file(path, max_bytes)
        return resume_session(data, cp), sig, looked_at, len(data)
    start: list[int] = []

    def locate(head: bytes) -> int | None:
        at = messages_offset(head)
        if at is None or at >= len(head):
            return None  # no messages array in the first _HEAD_BYTES: parsed whole
        start.append(at)
        return at + cp.cut - region_size(cp.cut)

    head, rest, sig, looked_at = read_session_parts(path, max_bytes, _HEAD_BYTES, locate)
    if rest is None:
        return None, sig, looked_at, sig.size
    region = region_size(cp.cut)
    parsed = resume_parts(head[: start[0] + 1], rest[:region], rest[region:], cp)
    return parsed, sig, looked_at, len(rest)


def _not_read(sessions_dir: str, session_id: str, exc: TooLarge | OSError | MemoryError) -> Loaded | None:
    if is_transient(exc):
        return _not_now(session_id, exc)
    st = lstat_session(sessions_dir, session_id)
    if st is None:
        return None
    sig = Signature.of(st)
    reason = f"cannot read: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
    return Loaded(session_id, sig, racy_mark(sig, time.time_ns()), reason, 0)


def _not_now(session_id: str, exc: BaseException) -> Loaded:
    if isinstance(exc, MemoryError):
        reason = "out of memory"
    elif isinstance(exc, OSError):
        reason = why_not(exc)
    else:
        reason = str(exc)
    return Loaded(session_id, Signature(0, 0, 0, 0), 0, f"cannot read it now: {reason}", 0, transient=True)


def _moved_on(sessions_dir: str, session_id: str, read: Signature) -> bool:
    """Whether a file that could not be resumed has changed since it was read (cc-web is still
    writing it): then it is read again, rather than parsed whole in a state already gone. A write
    sets the times when it starts, and only the size moves while it copies: hence the wait before."""
    st = lstat_session(sessions_dir, session_id)
    return st is not None and Signature.of(st) != read


def _load_chunk(sessions_dir: str, chunk: list[Wanted], max_bytes: int) -> list[Loaded | None]:
    return [load_session(sessions_dir, w.session_id, max_bytes, w.resume_from) for w in chunk]


# Across the pipe, a Loaded travels as plain tuples: unpickling a dataclass (or a NamedTuple, whose
# pickle calls its class) costs several times more.
def _flatten(item: Loaded | None) -> tuple[object, ...] | None:
    if item is None:
        return None
    sig = (item.sig.ino, item.sig.size, item.sig.mtime_ns, item.sig.ctime_ns)
    row = None if item.row is None else tuple(item.row)
    checkpoint, base = _flat_checkpoint(item.checkpoint), _flat_checkpoint(item.base)
    return (item.session_id, sig, item.racy, item.error, item.size, row, item.inputs, item.transient, checkpoint, base, item.writing)


def _unflatten(flat: tuple[Any, ...] | None) -> Loaded | None:
    if flat is None:
        return None
    session_id, sig, racy, error, size, row, inputs, transient, checkpoint, base, writing = flat
    return Loaded(
        session_id, Signature(*sig), racy, error, size, None if row is None else SessionRow._make(row), inputs,
        transient, None if checkpoint is None else Checkpoint(*checkpoint), None if base is None else Checkpoint(*base),
        writing,
    )  # fmt: skip


def _flat_checkpoint(cp: Checkpoint | None) -> tuple[object, ...] | None:
    return None if cp is None else astuple(cp)


def load_many(
    sessions_dir: str, wanted: list[Wanted], max_bytes: int, budget: int = PARSE_BYTES_IN_FLIGHT
) -> Iterator[tuple[str, Loaded | None]]:
    """Load files, in parallel when there is enough to read, with at most `budget` bytes in flight
    in the workers (at most one per core)."""
    # Resumable files first, here (cheap). Those that cannot be resumed now are loaded again below,
    # still with their checkpoint (a rewrite caught half-way may be complete by then), sized by the
    # largest of what was seen: a stat or read in the middle of a rewrite sees a small file.
    whole: list[Wanted] = []
    for w in wanted:
        if w.resume_from is None:
            whole.append(w)
            continue
        loaded = _load(sessions_dir, w.session_id, max_bytes, w.resume_from, whole=False, patient=w.patient)
        if isinstance(loaded, NotResumed):
            whole.append(Wanted(w.session_id, max(w.size, loaded.size, w.resume_from.cut), w.resume_from, w.patient))
        else:
            yield w.session_id, loaded
    workers = os.cpu_count() or 1
    total = sum(w.size for w in whole)
    if not any(w.size >= ALONE_MIN_BYTES for w in whole) and (
        total < PARALLEL_MIN_BYTES or workers < 2 or len(whole) < 2
    ):
        for w in whole:
            yield w.session_id, load_session(sessions_dir, w.session_id, max_bytes, w.resume_from)
        return
    whole.sort(key=lambda w: w.session_id)
    parse: list[Wanted] = []
    for w in whole:
        cut = _cut_short(sessions_dir, w.session_id, max_bytes) if w.size >= ALONE_MIN_BYTES else None
        if cut is None:
            parse.append(w)
        else:
            yield w.session_id, cut
    if parse:
        yield from _load_in_workers(sessions_dir, list(_chunks(parse)), max_bytes, workers, budget)


def _cut_short(sessions_dir: str, session_id: str, max_bytes: int) -> Loaded | None:
    """A huge file caught in the middle of a write, known from its two ends (sessionfile.cut_short):
    a worker would start, read and parse it to learn the same, a third of a second or more at
    every look while a giant conversation is being written. None when its ends do not say."""
    try:
        ends = read_session_ends(os.path.join(sessions_dir, session_id + ".json"), max_bytes, ENDS_BYTES)
    except (NotASession, TooLarge, OSError):
        return None  # the whole load says what it is
    if ends is None:
        return None  # changed while its ends were read: the whole load reads it again until it holds
    head, tail, sig, looked_at = ends
    reason = cut_short(head, tail)
    return None if reason is None else Loaded(session_id, sig, racy_mark(sig, looked_at), reason, sig.size)


def _load_in_workers(
    sessions_dir: str, chunks: list[list[Wanted]], max_bytes: int, workers: int, budget: int
) -> Iterator[tuple[str, Loaded | None]]:
    env = worker_environment()
    procs = [
        subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
        for _ in range(min(workers, len(chunks)))
    ]
    queues = {_stdout(proc): (proc, deque[list[Wanted]]()) for proc in procs}
    todo = deque(chunks)
    flight = _Flight(budget)
    # Each worker's answers are read by a thread of their own as soon as they come, so a worker never
    # waits on a full pipe while the caller writes a batch to the index (which releases the GIL in
    # SQLite): parsing and writing overlap. The budget still counts a chunk until it is yielded.
    inbox: SimpleQueue[tuple[int, Any]] = SimpleQueue()
    readers = [threading.Thread(target=_read_answers, args=(fd, inbox), daemon=True) for fd in queues]
    for reader in readers:
        reader.start()

    def retire(fd: int) -> None:
        # A worker died (out of memory, killed): the chunks it held go back to the queue.
        proc, queue = queues.pop(fd)
        proc.kill()
        for chunk in queue:
            flight.landed(chunk)
        todo.extendleft(reversed(queue))

    try:
        for fd, (proc, _) in list(queues.items()):
            try:
                _send(proc, (sessions_dir, max_bytes))
            except OSError:
                retire(fd)
        while queues and (todo or any(queue for _, queue in queues.values())):
            _hand_out(queues, todo, flight, retire)
            fd, results = inbox.get()
            if fd not in queues:
                continue  # the last word of a worker retired already
            if isinstance(
                results, BaseException
            ):  # a worker that died or garbled its answer is replaced by this process
                retire(fd)
                continue
            chunk = queues[fd][1].popleft()
            flight.landed(chunk)
            yield from zip((w.session_id for w in chunk), map(_unflatten, results))
        while todo:  # no worker left
            chunk = todo.popleft()
            yield from zip((w.session_id for w in chunk), _load_chunk(sessions_dir, chunk, max_bytes))
    finally:
        _stop_workers(procs, readers)


def _hand_out(
    queues: dict[int, tuple[subprocess.Popen[bytes], deque[list[Wanted]]]],
    todo: deque[list[Wanted]],
    flight: _Flight,
    retire: Callable[[int], None],
) -> None:
    """Top up each worker's queue from `todo`, as deep as `_queue_depth` and the budget allow."""
    for fd, (proc, queue) in list(queues.items()):
        while todo and len(queue) < _queue_depth(len(todo), len(queues)) and flight.admits(todo[0]):
            queue.append(todo.popleft())
            flight.sent(queue[-1])
            try:
                _send(proc, [(w.session_id, _flat_checkpoint(w.resume_from)) for w in queue[-1]])
            except OSError:
                retire(fd)
                break


def _stop_workers(procs: list[subprocess.Popen[bytes]], readers: list[threading.Thread]) -> None:
    """End of input tells a worker to exit; one that does not is killed."""
    for proc in procs:
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    for reader in readers:
        reader.join()


def worker_environment() -> dict[str, str]:
    """A parse worker's environment: this process's, its import path, and the allocator's settings."""
    return {**_WORKER_MALLOC, **os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _queue_depth(chunks_left: int, workers: int) -> int:
    """How many chunks a worker may hold when `chunks_left` are still to be handed out."""
    return max(_CHUNKS_NEAR_END, min(_CHUNKS_IN_FLIGHT, -(-chunks_left // workers)))


def _read_answers(fd: int, inbox: SimpleQueue[tuple[int, Any]]) -> None:
    """A reader thread: a worker's answers into `inbox`, in order, then the exception that ended them
    (EOFError once the worker has exited)."""
    while True:
        try:
            inbox.put((fd, _receive(fd)))
        except Exception as exc:  # noqa: BLE001 - handed to the scheduler, which retires the worker
            inbox.put((fd, exc))
            return


class _Flight:
    """The bytes handed to workers and not answered yet, kept within a budget, with files larger
    than a chunk one at a time. Whatever the budget, a chunk goes out when nothing else is in flight."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.bytes = 0
        self.chunks = 0
        self.big = 0

    def admits(self, chunk: list[Wanted]) -> bool:
        size = _size(chunk)
        if self.chunks == 0:
            return True
        return self.bytes + size <= self.budget and not (self.big and _alone(chunk))

    def sent(self, chunk: list[Wanted]) -> None:
        self._count(chunk, 1)

    def landed(self, chunk: list[Wanted]) -> None:
        self._count(chunk, -1)

    def _count(self, chunk: list[Wanted], sign: int) -> None:
        size = _size(chunk)
        self.bytes += sign * size
        self.chunks += sign
        self.big += sign * _alone(chunk)


def _size(chunk: list[Wanted]) -> int:
    return sum(w.size for w in chunk)


def _alone(chunk: list[Wanted]) -> bool:
    """A file larger than a chunk, which `_chunks` sends alone. Not any chunk over _CHUNK_BYTES: a
    chunk of small files closes only once it passes that size, and counting those as large files
    let one worker parse at a time."""
    return len(chunk) == 1 and chunk[0].size > _CHUNK_BYTES


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
    """A worker's loop: settings first, then chunks of ids in, lists of results out, until EOF.

    A parent that is gone (stopped or killed mid-pass) ends the worker quietly: its stderr is the
    parent's, which for `serve` is the MCP client's log."""
    # A terminal's ^C reaches the whole process group: the parent decides, and its end closes our pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol owns the real stdout; anything else printed here goes to stderr instead.
    stdin, stdout = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        sessions_dir, max_bytes = _receive(stdin)
        while True:
            chunk = _receive(stdin)
            wanted = [Wanted(session_id, 0, None if cp is None else Checkpoint(*cp)) for session_id, cp in chunk]
            _write_frame(stdout, [_flatten(item) for item in _load_chunk(sessions_dir, wanted, max_bytes)])
    except (EOFError, BrokenPipeError):
        return


def _chunks(wanted: list[Wanted]) -> Iterator[list[Wanted]]:
    """Files in order, cut into chunks of about _CHUNK_BYTES; a file larger than that is a chunk alone."""
    chunk: list[Wanted] = []
    chunk_bytes = 0
    for w in wanted:
        if w.size > _CHUNK_BYTES and chunk:
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(w)
        chunk_bytes += w.size
        if chunk_bytes >= _CHUNK_BYTES or len(chunk) >= _CHUNK_FILES:
            yield chunk
            chunk, chunk_bytes = [], 0
    if chunk:
        yield chunk


if __name__ == "__main__":
    # Run the imported module's copy, so results pickle as indexer.load.Loaded, not __main__.Loaded.
    from ccweb_index.indexer.load import _worker as worker

    worker()
