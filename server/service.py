"""The tools' single code path: parse the request, answer it from the index, or from the files.

From the index (server.from_index) when it works: fresh for exactly what the answer depends on.
When it fails (docs/reliability.md; the failure types are in indexer.errors, what happens next in
indexer.handle): a damaged or replaced index is rebuilt and tried once more; otherwise that call is
answered from the session files (server.from_files), with the same answer. With a watcher, the
supervisor (server.supervisor) keeps it on the right directory and re-opens a lost index.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ccweb_index.indexer.db import get_meta, resolve_db_path, settle_wal
from ccweb_index.indexer.errors import IndexBroken, IndexFailure, IndexMoved
from ccweb_index.indexer.files import DEFAULT_MAX_SESSION_BYTES
from ccweb_index.indexer.handle import ANSWERING_FROM_FILES, IndexHandle
from ccweb_index.indexer.load import PARSE_BYTES_IN_FLIGHT, UnreadableLog
from ccweb_index.indexer.progress import LoggedProgress
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.stored import STORED_CHARS_KEY
from ccweb_index.indexer.watch import Watcher
from ccweb_index.process import why_not
from ccweb_index.server import queries
from ccweb_index.server.changes import ChangeHub
from ccweb_index.server.from_files import FileAnswers
from ccweb_index.server.from_index import IndexAnswers, WaitCheck, WaitState
from ccweb_index.server.supervisor import Supervisor
from ccweb_index.server.tools import (
    DEFAULT_MAX_WAITS,
    LIST_CONVERSATIONS,
    LIST_USER_INPUTS,
    WAIT_FOR_CONVERSATIONS,
    ToolError,
    conversations_request,
    inputs_request,
    unknown_tool,
)

log = logging.getLogger("ccweb_index")

R = TypeVar("R")

# An answer's JSON text: the bytes of `json.dumps(payload, ensure_ascii=False, separators=(",", ":"))`
# (tests/test_answer_text.py), about ten times faster. An answer holds no lone surrogate (msgspec
# refuses one; so do the session-file decoder, the SDK's request parser and its writer).
_TEXT = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class ToolResult:
    payload: dict[str, Any]
    is_error: bool

    def text(self) -> str:
        return _TEXT.encode(self.payload).decode()


class Service:
    """One sessions directory, its index, and optionally a watcher."""

    def __init__(
        self,
        sessions_dir: str | os.PathLike[str],
        db: str | os.PathLike[str] | None = None,
        *,
        watch: bool = False,
        poll: bool = False,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        parse_bytes_in_flight: int = PARSE_BYTES_IN_FLIGHT,
        meanwhile: str | None = ANSWERING_FROM_FILES,
    ) -> None:
        self.sessions_dir = os.path.realpath(sessions_dir)
        self.db_path: Path = resolve_db_path(self.sessions_dir, db)
        self.handle = IndexHandle(self.db_path, self.sessions_dir, meanwhile=meanwhile)
        unreadable = UnreadableLog()  # shared: a file state is logged once, whoever read it
        self.indexer = Indexer(
            self.handle, max_session_bytes=max_session_bytes, unreadable=unreadable, parse_bytes_in_flight=parse_bytes_in_flight
        )
        self._first_pass = self.indexer.progress = LoggedProgress("first indexing pass", once=True)
        self.changes = ChangeHub(self.db_path)  # wakes waits (server.waits) when the index changes
        self.indexer.on_indexed = self.changes.poke
        self._supervisor = (
            Supervisor(self.indexer, poll=poll, on_error=functools.partial(self.handle.failed, background=True))
            if watch
            else None
        )
        self._from_index = IndexAnswers(self.indexer, lambda: self.watcher)
        self._from_files = FileAnswers(self.sessions_dir, self.db_path, max_session_bytes, unreadable, parse_bytes_in_flight)
        self._closed = False
        with self.handle.lock:
            self.handle.open()

    @property
    def watcher(self) -> Watcher | None:
        return None if self._supervisor is None else self._supervisor.watcher

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Bring the index in line (and start the watcher). Calls made meanwhile wait for it."""
        with self.handle.lock:
            if self._closed:
                return
            if self._supervisor is not None:
                self._supervisor.start()
            if self.watcher is None:  # no watcher, or no directory yet: the index says so
                try:
                    self.indexer.reconcile()
                except Exception as exc:
                    self.handle.failed(exc)
            self.settle()

    def start_in_background(self) -> None:
        # Take the lock before returning, so no call can slip in ahead of the first reconcile (a
        # call that waits longer than from_index.LOCK_WAIT_SECONDS answers from the files instead).
        ready = threading.Event()

        def run() -> None:
            with self.handle.lock:
                ready.set()
                try:
                    self.start()
                except Exception:
                    log.exception("initial indexing failed; calls will index what they need")

        threading.Thread(target=run, name="ccweb-index-start", daemon=True).start()
        ready.wait()

    def close(self, *, wait: bool = True) -> None:
        """`wait=False` (SIGTERM on stdio; the process exits next): a first indexing pass that still
        holds the index is not waited for; SQLite rolls back what it leaves, and the index is a cache."""
        if not wait:
            if not self.handle.lock.acquire(blocking=False):
                return
            self.handle.lock.release()
        with self.handle.lock:  # waits for a start in progress; no start begins after this
            self._closed = True
        if self._supervisor is not None:
            self._supervisor.close()
        self.changes.close()
        self.handle.close()

    def settle(self) -> None:
        """Empty the WAL once a large write is over (`indexer.db.settle_wal`); if it cannot be now,
        it is left as it is (its size stays bounded by db.WAL_LIMIT_BYTES)."""
        try:
            with self.handle.connection() as conn:
                settled = settle_wal(conn, self.db_path)
        except IndexFailure as exc:
            log.debug("the WAL of %s was not checkpointed: %s", self.db_path, exc)
            return
        if not settled:
            log.debug("the WAL of %s is still read by another process; it is cut back at a later write", self.db_path)

    def progress(self) -> dict[str, Any] | None:
        """How far the first indexing pass has got (indexer.progress.Snapshot.as_dict); None when
        it is not running (not begun, or over)."""
        snapshot = self._first_pass.snapshot()
        return None if snapshot is None else snapshot.as_dict()

    def counts(self) -> dict[str, object]:
        with self.handle.connection() as conn:
            return queries.counts(conn)

    def stored_chars(self) -> object:
        """How many code points of each input the index keeps (indexer.stored), as it records it."""
        with self.handle.connection() as conn:
            return get_meta(conn, STORED_CHARS_KEY)

    def unreadable(self) -> list[tuple[str, str, bool]]:
        with self.handle.connection() as conn:
            return queries.unreadable(conn)

    # --- the tools ------------------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | None, source: str | None) -> ToolResult:
        arguments = arguments if isinstance(arguments, dict) else {}
        try:
            if name == LIST_USER_INPUTS:
                inputs = inputs_request(arguments, source)
                payload = self._answer(inputs, self._from_index.inputs, self._from_files.inputs)
            elif name == LIST_CONVERSATIONS:
                conversations = conversations_request(arguments, source)
                payload = self._answer(conversations, self._from_index.conversations, self._from_files.conversations)
            elif name == WAIT_FOR_CONVERSATIONS:
                return self._wait_here(arguments, source)
            else:
                raise unknown_tool(name)
        except ToolError as exc:
            return ToolResult(exc.payload(), True)
        return ToolResult(payload, False)

    def wait_check(self, check: WaitCheck) -> WaitState:
        """One look at the index for a wait (server.waits), from the files when the index fails."""
        state: WaitState = self._answer(check, self._from_index.wait_check, self._from_files.wait_check)
        return state

    def _wait_here(self, arguments: dict[str, Any], source: str | None) -> ToolResult:
        """The wait, for a caller without an event loop (`ccweb-index call`); the MCP server runs
        server.waits on its own loop, where waits share its cap and its shutdown."""
        import anyio

        from ccweb_index.server.waits import WaitRoom, wait_for_conversations

        async def wait() -> tuple[dict[str, Any], bool]:
            return await wait_for_conversations(self, WaitRoom(DEFAULT_MAX_WAITS), arguments, source)

        return ToolResult(*anyio.run(wait))

    def _answer(self, request: R, from_index: Callable[[R], Any], from_files: Callable[[R, bool], Any]) -> Any:
        """From the index when it works; else, for this call, from the files. A damaged or replaced
        index is rebuilt and tried once more first."""
        handle = self.handle
        use_index = True  # whether the files' answer may read last good versions from the index
        if handle.may_try():
            for attempt in (1, 2):
                changes = handle.total_changes()
                try:
                    payload = from_index(request)
                except ToolError:
                    handle.worked(handle.total_changes() != changes)
                    raise
                except (IndexBroken, IndexMoved) as exc:
                    handle.failed(exc)
                    if attempt == 1:
                        continue
                    use_index = not isinstance(exc, IndexBroken)
                    break
                except Exception as exc:
                    handle.failed(exc)
                    break
                handle.worked(handle.total_changes() != changes)
                return payload
        try:
            return from_files(request, use_index)
        except OSError as exc:  # the directory itself cannot be read (a file's failure is per file)
            raise ToolError(
                "sessions_directory_unreadable",
                f"The sessions directory cannot be read ({why_not(exc)}); nothing can be answered until "
                "it can. Try again later.",
            ) from None
