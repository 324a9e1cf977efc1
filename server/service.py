"""Answering the tools: make the index fresh for exactly what an answer depends on, then read it.

Freshness, per tool:

- ccweb_list_user_inputs depends on one file. Its signature is compared with the index (and a racy
  one is re-read) on every call, watcher or not.
- ccweb_list_conversations depends on the directory. With a synced watcher (see indexer.watch),
  every change before the call is already in the index. Without one, the directory's own signature
  reveals files added, removed or replaced; for scope "children" the answer's files are then
  re-checked (a session becomes a child when it is created, which changes the directory); for
  scope "all" and for filters, where an in-place edit of any file can change the answer, every
  file's signature is compared (a stat each, no reads).

When the index fails (docs/reliability.md):

- Before each call, a few stats tell whether the index's files are still the ones this process
  opened (`indexer.db.Index.problem`); if they were deleted, replaced, truncated, or lost their
  `-wal` / `-shm`, the index is replaced by a new one, brought in line with the files, and used.
- A damaged database (corrupt, not a database, schema gone) is deleted and rebuilt the same way.
- An index that cannot be used now (locked by another process beyond the busy timeout, the disk
  full, not writable, not openable) does not fail the call: that call, and the calls of a short,
  growing back-off period after it, are answered from the session files directly, with the same
  code that fills the index (`indexer.load`), so the answer is the same. A file that is unreadable
  now stands in with its last good version read from the index when the index is still readable.
- Each fault is logged once when it starts (and at INFO when it ends), never once per call.

A supervisor thread (with a watcher) re-checks every half second that the watcher watches the
directory the sessions path leads to now (it may have been deleted and recreated, renamed, replaced
by a symlink, or not exist yet) and starts a new watcher when not, and re-opens a lost index.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccweb_index.indexer.db import (
    Index,
    IndexMismatch,
    IndexUnavailable,
    NoIndex,
    classify,
    open_handle,
    resolve_db_path,
)
from ccweb_index.indexer.files import DEFAULT_MAX_SESSION_BYTES, dir_identity, list_sessions, lstat_session
from ccweb_index.indexer.load import Loaded, load_many, load_session
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.watch import Watcher, start_watcher
from ccweb_index.server import queries
from ccweb_index.server.tools import (
    CONVERSATIONS_LIMIT,
    INPUTS_LIMIT,
    INPUTS_MAX_CHARS,
    LIST_CONVERSATIONS,
    LIST_USER_INPUTS,
    StoredInput,
    ToolError,
    clamp_int,
    conversation_row,
    filter_key,
    missing_source_for_children,
    not_found,
    requested_conversation,
    unknown_tool,
    unreadable,
    user_inputs_answer,
    valid_source,
)

log = logging.getLogger("ccweb_index")

# How often the supervisor looks at the directory and the index (a few stats).
SUPERVISE_SECONDS = 0.5
# How long a call waits for another thread of this process to finish with the index (e.g. a large
# initial build) before answering from the files instead.
LOCK_WAIT_SECONDS = 5.0
# After the index failed, calls answer from the files for this long, doubling up to the maximum.
BACK_OFF_SECONDS = (1.0, 30.0)


@dataclass(frozen=True, slots=True)
class ToolResult:
    payload: dict[str, Any]
    is_error: bool

    def text(self) -> str:
        return json.dumps(self.payload, ensure_ascii=False, separators=(",", ":"))


class _Faults:
    """Conditions logged once when they begin (WARNING) and once when they end (INFO).

    A condition that flaps (a nearly full disk where small writes fit and large ones do not) is not
    logged again within QUIET_SECONDS of the last time its message was logged.
    """

    QUIET_SECONDS = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, tuple[str, bool]] = {}  # key -> (message, logged)
        self._logged_at: dict[str, float] = {}

    def begin(self, key: str, message: str) -> None:
        with self._lock:
            current = self._active.get(key)
            if current is not None and current[0] == message:
                return
            now = time.monotonic()
            loud = now - self._logged_at.get(message, -self.QUIET_SECONDS) >= self.QUIET_SECONDS
            self._active[key] = (message, loud)
            if loud:
                self._logged_at[message] = now
                if len(self._logged_at) > 100:  # messages can vary (they quote errors): keep it small
                    self._logged_at = {m: t for m, t in self._logged_at.items() if now - t < self.QUIET_SECONDS}
        if loud:
            log.warning("%s", message)

    def end(self, key: str, message: str) -> None:
        with self._lock:
            current = self._active.pop(key, None)
        if current is not None and current[1]:
            log.info("%s", message)

    def active(self, key: str) -> str | None:
        with self._lock:
            current = self._active.get(key)
            return None if current is None else current[0]


# --- the two requests, validated -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _InputsRequest:
    conversation_id: str
    limit: int
    max_chars: int


@dataclass(frozen=True, slots=True)
class _ConversationsRequest:
    children_of: str | None
    source: str | None
    limit: int
    agent_key: str | None
    status_key: str | None


def _inputs_request(arguments: dict[str, Any], source: str | None) -> _InputsRequest:
    return _InputsRequest(
        requested_conversation(arguments, source),
        clamp_int(arguments.get("limit"), INPUTS_LIMIT),
        clamp_int(arguments.get("maxChars"), INPUTS_MAX_CHARS),
    )


def _conversations_request(arguments: dict[str, Any], source: str | None) -> _ConversationsRequest:
    source = valid_source(source)
    children = arguments.get("scope") == "children"
    if children and source is None:
        raise missing_source_for_children()
    return _ConversationsRequest(
        source if children else None,
        source,
        clamp_int(arguments.get("limit"), CONVERSATIONS_LIMIT),
        filter_key(arguments.get("agent")),
        filter_key(arguments.get("status")),
    )


def _conversations_answer(request: _ConversationsRequest, rows: list[Any]) -> dict[str, Any]:
    limit = request.limit
    return {
        "scope": "children" if request.children_of is not None else "all",
        "sourceConversationId": request.source,
        "limit": limit,
        "returnedCount": min(len(rows), limit),
        "hasMore": len(rows) > limit,
        "conversations": [conversation_row(row) for row in rows[:limit]],
    }


_ROW_KEYS = (
    "title", "agent", "agent_key", "status", "created_at_ms", "updated_at_ms", "created_from_kind",
    "created_from_source", "user_input_count",
)  # fmt: skip, the order of indexer.load.Loaded.row


class Service:
    """One sessions directory, its index, and optionally a watcher: the tools' single code path."""

    def __init__(
        self,
        sessions_dir: str | os.PathLike[str],
        db: str | os.PathLike[str] | None = None,
        *,
        watch: bool = False,
        poll: bool = False,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
    ) -> None:
        self.sessions_dir = os.path.realpath(sessions_dir)
        self.db_path: Path = resolve_db_path(self.sessions_dir, db)
        self.max_session_bytes = max_session_bytes
        self._lock = threading.RLock()
        self.indexer = Indexer(
            self.sessions_dir, NoIndex("not opened yet"), max_session_bytes=max_session_bytes, lock=self._lock
        )  # type: ignore[arg-type]
        self.index: Index | None = None
        self.watcher: Watcher | None = None
        self._want_watch = watch
        self._poll = poll
        self._closed = False
        self._faults = _Faults()
        self._retry_at = 0.0  # monotonic time before which calls do not try the index
        self._back_off = 0.0
        self._replace: str | None = None  # why the index must be replaced before it is used again
        self._faulty = False
        self._needs_reconcile = False  # a replaced index is empty until brought in line
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._logged_unreadable: dict[str, tuple[Any, str]] = {}
        with self._lock:
            self._open(None)

    @property
    def conn(self) -> sqlite3.Connection:
        return self.indexer.conn

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Bring the index in line (and start the watcher). Calls made meanwhile wait for it."""
        with self._lock:
            if self._closed:
                return
            if self._want_watch:
                self._keep_watcher()
                if self.watcher is None:  # no directory yet: the index says so
                    self._reconcile_quietly()
                if self._supervisor is None:
                    self._supervisor = threading.Thread(target=self._supervise, name="ccweb-index-supervisor", daemon=True)
                    self._supervisor.start()
            else:
                self._reconcile_quietly()

    def start_in_background(self) -> None:
        # Take the lock before returning, so no call can slip in ahead of the first reconcile (a
        # call that waits longer than LOCK_WAIT_SECONDS answers from the files instead).
        ready = threading.Event()

        def run() -> None:
            with self._lock:
                ready.set()
                try:
                    self.start()
                except Exception:
                    log.exception("initial indexing failed; calls will index what they need")

        threading.Thread(target=run, name="ccweb-index-start", daemon=True).start()
        ready.wait()

    def close(self) -> None:
        with self._lock:  # waits for a start in progress; no start begins after this
            self._closed = True
            watcher, self.watcher = self.watcher, None
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=30)
        # Stopped outside the lock: the watcher's applier may be waiting for it.
        if watcher is not None:
            watcher.stop()
        with self._lock:
            if self.index is not None:
                self.index.close()
                self.index = None
            self.indexer.conn = NoIndex("closed")  # type: ignore[assignment]

    def counts(self) -> dict[str, object]:
        with self._lock:
            return queries.counts(self.indexer.conn)

    def unreadable(self) -> list[tuple[str, str, bool]]:
        with self._lock:
            return queries.unreadable(self.indexer.conn)

    def _reconcile_quietly(self) -> None:
        try:
            self.indexer.reconcile()
        except Exception as exc:
            self._index_failed(exc)

    # --- the tools ------------------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | None, source: str | None) -> ToolResult:
        arguments = arguments if isinstance(arguments, dict) else {}
        try:
            if name == LIST_USER_INPUTS:
                request: Any = _inputs_request(arguments, source)
                return ToolResult(self._answer(request, self._inputs_from_index, self._inputs_from_files), False)
            if name == LIST_CONVERSATIONS:
                request = _conversations_request(arguments, source)
                return ToolResult(
                    self._answer(request, self._conversations_from_index, self._conversations_from_files), False
                )
            raise unknown_tool(name)
        except ToolError as exc:
            return ToolResult(exc.payload(), True)

    def list_user_inputs(self, arguments: dict[str, Any], source: str | None) -> dict[str, Any]:
        return self._answer(_inputs_request(arguments, source), self._inputs_from_index, self._inputs_from_files)

    def list_conversations(self, arguments: dict[str, Any], source: str | None) -> dict[str, Any]:
        request = _conversations_request(arguments, source)
        return self._answer(request, self._conversations_from_index, self._conversations_from_files)

    def _answer(self, request: Any, from_index: Callable[[Any], Any], from_files: Callable[[Any, bool], Any]) -> Any:
        """From the index when it works; else, for this call, from the files. A damaged or replaced
        index is rebuilt and tried once more first."""
        use_index = True
        if time.monotonic() >= self._retry_at:
            for attempt in (1, 2):
                changes = self._total_changes()
                try:
                    payload = from_index(request)
                except ToolError:
                    self._index_ok(self._total_changes() != changes)
                    raise
                except Exception as exc:
                    kind = self._index_failed(exc)
                    if kind in ("broken", "moved") and attempt == 1:
                        continue
                    use_index = kind != "broken"
                    break
                self._index_ok(self._total_changes() != changes)
                return payload
        try:
            return from_files(request, use_index)
        except OSError as exc:  # the directory itself cannot be read (a file's failure is per file)
            raise ToolError(
                "sessions_directory_unreadable",
                f"The sessions directory cannot be read ({exc.strerror or exc}); nothing can be answered until "
                "it can. Try again later.",
            ) from None

    # --- answers from the index ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if not self._lock.acquire(timeout=LOCK_WAIT_SECONDS):
            error = IndexUnavailable("another call or the initial indexing has held the index for too long")
            error.busy = True  # type: ignore[attr-defined]
            raise error
        try:
            yield
        finally:
            self._lock.release()

    def _inputs_from_index(self, request: _InputsRequest) -> dict[str, Any]:
        conversation_id = request.conversation_id
        with self._locked():
            self._check_index()
            self.indexer.refresh([conversation_id])
            conn = self.indexer.conn
            state = queries.session_state(conn, conversation_id)
            if state is None:
                raise not_found(conversation_id)
            good, error, total = state
            if not good:
                raise unreadable(conversation_id, error or "unknown reason")
            newest = queries.newest_inputs(conn, conversation_id, request.limit)
        return user_inputs_answer(conversation_id, request.limit, request.max_chars, total, newest)

    def _conversations_from_index(self, request: _ConversationsRequest) -> dict[str, Any]:
        with self._locked():
            self._check_index()
        # The cookie round trip happens outside the lock, so concurrent calls share the wait. The
        # watcher proves nothing about a directory it does not watch (the path now leads elsewhere).
        watcher = self.watcher
        synced = (
            watcher is not None
            and watcher.sync()
            and watcher.watched is not None
            and watcher.watched == dir_identity(self.sessions_dir)
        )
        with self._locked():
            if not synced:
                self._check_files(children_of=request.children_of)
            rows = queries.conversations(
                self.indexer.conn,
                children_of=request.children_of,
                agent_key=request.agent_key,
                status_key=request.status_key,
                limit=request.limit + 1,
            )
        return _conversations_answer(request, rows)

    def _check_files(self, *, children_of: str | None) -> None:
        """Without a synced watcher: compare the signatures of every file the answer could depend on."""
        if children_of is None:
            self.indexer.reconcile()
            return
        self.indexer.refresh_listing()
        self.indexer.refresh(queries.children_ids(self.indexer.conn, children_of))

    # --- answers from the files ---------------------------------------------------------------------

    def _inputs_from_files(self, request: _InputsRequest, use_index: bool) -> dict[str, Any]:
        conversation_id = request.conversation_id
        loaded = load_session(self.sessions_dir, conversation_id, self.max_session_bytes)
        if loaded is None:
            raise not_found(conversation_id)
        if loaded.error is None:
            total = len(loaded.inputs)
            newest = [StoredInput(*item[1:]) for item in reversed(loaded.inputs[-request.limit :])]
        else:
            self._log_unreadable(loaded)
            good = self._last_good_inputs(conversation_id, request.limit) if use_index else None
            if good is None:
                raise unreadable(conversation_id, loaded.error)
            total, newest = good
        return user_inputs_answer(conversation_id, request.limit, request.max_chars, total, newest)

    def _conversations_from_files(self, request: _ConversationsRequest, use_index: bool) -> dict[str, Any]:
        try:
            listing = list_sessions(self.sessions_dir)
        except FileNotFoundError:
            listing = {}
        wanted = []
        for session_id in listing:
            st = lstat_session(self.sessions_dir, session_id)
            if st is not None:
                wanted.append((session_id, st.st_size))
        rows: list[dict[str, Any]] = []
        bad: list[str] = []
        for session_id, loaded in load_many(self.sessions_dir, wanted, self.max_session_bytes):
            if loaded is None:
                continue
            if loaded.error is not None:
                self._log_unreadable(loaded)
                bad.append(session_id)
            else:
                rows.append({"id": session_id, **dict(zip(_ROW_KEYS, loaded.row or (), strict=True))})
        if bad and use_index:
            rows += self._last_good_rows(bad)
        matching = [
            row
            for row in rows
            if (request.children_of is None
                or (row["created_from_source"] == request.children_of and row["created_from_kind"] == "mcp"))
            and (request.agent_key is None or row["agent_key"] == request.agent_key)
            and (request.status_key is None or row["status"] == request.status_key)
        ]  # fmt: skip
        matching.sort(key=lambda row: row["id"])
        matching.sort(key=lambda row: row["updated_at_ms"], reverse=True)
        return _conversations_answer(request, matching[: request.limit + 1])

    def _log_unreadable(self, loaded: Loaded) -> None:
        # Shares the indexer's record of what it logged, so a file state is logged once either way.
        logged = getattr(self.indexer, "_logged_errors", self._logged_unreadable)
        state = (loaded.sig, loaded.error or "")
        if logged.get(loaded.session_id) != state:
            logged[loaded.session_id] = state
            log.warning("session %s is unreadable: %s", loaded.session_id, loaded.error)

    def _read_index(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        """`read` on a read-only connection of its own (never waits for this process's lock), or None."""
        uri = f"file:{urllib.parse.quote(str(self.db_path))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=0.2)
            try:
                return read(conn)
            finally:
                conn.close()
        except sqlite3.Error:
            return None

    def _last_good_inputs(self, session_id: str, limit: int) -> tuple[int, list[StoredInput]] | None:
        def read(conn: sqlite3.Connection) -> tuple[int, list[StoredInput]] | None:
            state = queries.session_state(conn, session_id)
            if state is None or not state[0]:
                return None
            return state[2], queries.newest_inputs(conn, session_id, limit)

        return self._read_index(read)

    def _last_good_rows(self, session_ids: list[str]) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            out = []
            for start in range(0, len(session_ids), 500):
                chunk = session_ids[start : start + 500]
                cursor = conn.execute(
                    f"SELECT id, {', '.join(_ROW_KEYS)} FROM sessions WHERE good = 1 "
                    f"AND id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
                out += [dict(zip(("id", *_ROW_KEYS), row, strict=True)) for row in cursor]
            return out

        return self._read_index(read) or []

    # --- the index: opening, checking, failing ---------------------------------------------------------

    def _open(self, replacing: Index | None) -> bool:
        """Open (or replace) the index. Under the lock. IndexMismatch is a configuration error."""
        try:
            index = open_handle(self.db_path, self.sessions_dir, replacing=replacing)
        except IndexMismatch:
            raise
        except (sqlite3.Error, OSError) as exc:
            self.index = None
            self.indexer.conn = NoIndex(str(exc))  # type: ignore[assignment]
            self._start_back_off()
            self._faults.begin(
                "index",
                f"cannot open the index {self.db_path} ({exc}); answering from the session files until it can be opened",
            )
            return False
        self.index = index
        self.indexer.conn = index.conn
        self._replace = None
        self._faults.end("index", f"the index {self.db_path} is open")
        return True

    def _check_index(self) -> None:
        """Make sure the index in use is the one at the path, and complete. Under the lock.

        Raises IndexUnavailable (or an sqlite3 error) when there is no usable index now.
        """
        if self.index is not None:
            problem = self._replace or self.index.problem()
            if problem is not None:
                if self._replace is None:  # else _index_failed has said it
                    self._faulty = True
                    self._faults.begin(
                        "index", f"the index {self.db_path}: {problem}; replacing it and rebuilding it from the session files"
                    )
                self._needs_reconcile = True
                self._open(self.index)
        elif time.monotonic() >= self._retry_at and self._open(None):
            self._needs_reconcile = True
        if self.index is None:
            raise IndexUnavailable(getattr(self.indexer.conn, "reason", "the index is not open"))
        if self._needs_reconcile:
            self.indexer.reconcile()
            self._needs_reconcile = False

    def _start_back_off(self) -> None:
        self._back_off = min(max(self._back_off * 2, BACK_OFF_SECONDS[0]), BACK_OFF_SECONDS[1])
        self._retry_at = time.monotonic() + self._back_off

    def _total_changes(self) -> int:
        return getattr(self.indexer.conn, "total_changes", 0)

    def _index_ok(self, wrote: bool) -> None:
        """A call was answered from the index. A fault ends only when a write went through (this
        call's or another thread's): a read proves nothing about a lock or a full disk."""
        if self._faulty and wrote:
            self._faulty = False
            self._back_off = 0.0
            self._retry_at = 0.0
            self._faults.end("index", f"the index {self.db_path} works again")

    def _index_failed(self, exc: BaseException, *, background: bool = False) -> str:
        """Log what happened (once) and decide what happens next; returns the failure's kind.

        A call's failure starts (or extends) the back-off during which calls answer from the files;
        a background failure (the watcher's applier, which retries by itself) does not, or its
        retries would keep the calls from ever trying the index again.
        """
        self._faulty = True
        if isinstance(exc, IndexUnavailable) and self.index is None:
            if not background:
                self._start_back_off()  # no index, which was logged when opening it failed
            return "unavailable"
        if isinstance(exc, OSError):  # from the sessions directory itself (files' errors are per file)
            self._faults.begin("index", f"the sessions directory {self.sessions_dir} cannot be read ({exc.strerror or exc})")
            if not background:
                self._start_back_off()
            return "unavailable"
        if not isinstance(exc, sqlite3.Error):
            message = f"unexpected {type(exc).__name__} while using the index ({exc}); answering from the session files"
            if self._faults.active("index") != message:
                log.error("%s", message, exc_info=exc)
            self._faults.begin("index", message)
            if not background:
                self._start_back_off()
            return "bug"
        kind = classify(exc)
        path = self.db_path
        if kind == "busy":
            message = f"the index {path} is locked ({exc}); answering from the session files meanwhile"
        elif kind == "broken":
            message = f"the index {path} is damaged ({exc}); rebuilding it from the session files"
        elif kind == "moved":
            message = f"the index {path} was deleted or replaced while in use; replacing it and rebuilding it from the session files"
        else:
            message = f"the index {path} cannot be used ({exc}); answering from the session files until it can"
        self._faults.begin("index", message)
        if kind in ("broken", "moved"):
            self._replace = "it is damaged" if kind == "broken" else "it was deleted or replaced"
        elif not background:
            self._start_back_off()
        return kind

    def _background_failure(self, exc: BaseException) -> None:
        """The watcher's applier could not re-index (it retries by itself)."""
        self._index_failed(exc, background=True)

    # --- the supervisor: the directory and the index, in the background ---------------------------------

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_SECONDS):
            try:
                self._keep_watcher()
                self._keep_index()
            except Exception:
                log.exception("the supervisor failed; retrying")

    def _keep_index(self) -> None:
        if time.monotonic() < self._retry_at or not self._lock.acquire(blocking=False):
            return
        try:
            if self._closed:
                return
            self._check_index()
        except Exception as exc:
            self._index_failed(exc, background=True)
        finally:
            self._lock.release()

    def _keep_watcher(self) -> None:
        """Watch the directory the sessions path leads to now (a new watcher if it changed)."""
        with self._lock:
            if self._closed or not self._want_watch:
                return
            identity = dir_identity(self.sessions_dir)
            current = self.watcher
            if current is not None and current.running and current.watched is not None and current.watched == identity:
                return
            self.watcher = None
        if current is not None:
            current.stop()  # outside the lock: its applier may be waiting for it
        where = self.sessions_dir
        if identity is None:
            self._faults.begin(
                "directory",
                f"the sessions directory {where} does not exist; answering conversation_not_found and "
                "empty lists until it does",
            )
            return
        if current is not None:
            log.warning("the sessions directory %s changed (removed, renamed or replaced); watching it again", where)
        self._faults.end("directory", f"the sessions directory {where} exists again; watching it")
        started = start_watcher(self.indexer, poll=self._poll, on_error=self._background_failure)
        with self._lock:
            if not self._closed and self.watcher is None:
                self.watcher, started = started, None
        if started is not None:
            started.stop()
