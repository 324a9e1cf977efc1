"""Answers from the session files directly, for when the index cannot be used (docs/reliability.md).

They are made with the same code that fills the index (`indexer.load`) and select and order as the
index's queries do (`server.queries.select`), so the answer is the same. A file
that is unreadable now stands in with its last good version, read from the index on a read-only
connection of its own when the index is still readable.

A conversations answer needs every file read, so concurrent calls share one pass over the directory
(`SharedPass`) instead of making one each, and the pass spreads over at most one worker per core
(`indexer.load`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ccweb_index.indexer.files import list_sessions, lstat_session
from ccweb_index.indexer.load import PARSE_BYTES_IN_FLIGHT, UnreadableLog, Wanted, load_many, load_session
from ccweb_index.indexer.row import SessionRow
from ccweb_index.server import queries
from ccweb_index.server.from_index import WaitCheck, WaitState
from ccweb_index.server.tools import (
    UNKNOWN_POSITION,
    ConversationsRequest,
    InputsRequest,
    StoredInput,
    conversations_answer,
    encode_change_token,
    not_found,
    unreadable,
    user_inputs_answer,
    wait_answer,
)

T = TypeVar("T")

# How long the read-only look at the index for last good versions waits for a lock: it is optional.
_LAST_GOOD_WAIT_SECONDS = 0.2


class FileAnswers:
    def __init__(
        self,
        sessions_dir: str,
        db_path: Path,
        max_session_bytes: int,
        unreadable: UnreadableLog,
        parse_bytes_in_flight: int = PARSE_BYTES_IN_FLIGHT,
    ) -> None:
        self.sessions_dir = sessions_dir
        self.db_path = db_path
        self.max_session_bytes = max_session_bytes
        self.unreadable = unreadable
        self.parse_bytes_in_flight = parse_bytes_in_flight
        self._pass = SharedPass(self._read_directory)

    def inputs(self, request: InputsRequest, use_index: bool) -> dict[str, Any]:
        """`use_index`: whether the index may still be read for last good versions (not when broken)."""
        conversation_id = request.conversation_id
        loaded = load_session(self.sessions_dir, conversation_id, self.max_session_bytes)
        if loaded is None:
            raise not_found(conversation_id)
        start = None if request.start is None else request.start.seq
        if loaded.error is None:
            # As queries.newest_inputs: inputs[seq] is the input at seq.
            end = len(loaded.inputs) if start is None else max(0, min(start + 1, len(loaded.inputs)))
            page = reversed(loaded.inputs[max(0, end - request.limit - 1) : end])
            newest = [StoredInput(seq, mid, at, head.decode(), chars) for seq, mid, at, head, chars in page]
        else:
            self.unreadable.note(loaded)
            good = self._last_good_inputs(conversation_id, request.limit + 1, start) if use_index else None
            if good is None:
                raise unreadable(conversation_id, loaded.error, for_now=loaded.transient)
            newest = good
        return user_inputs_answer(request, newest)

    def conversations(self, request: ConversationsRequest, use_index: bool) -> dict[str, Any]:
        # The index's position, read before the files: what the index has not caught up with yet is
        # reported by the next wait (again), never lost. No index to read: the next wait reports all.
        position = (self._read_index(queries.change_position) if use_index else None) or UNKNOWN_POSITION
        rows, bad = self._pass.result()
        if bad and use_index:
            rows = rows + (self._read_index(lambda conn: queries.good_rows(conn, bad)) or [])
        return conversations_answer(request, queries.select(rows, request)[: request.limit + 1], position)

    def wait_check(self, check: WaitCheck, use_index: bool) -> WaitState:
        """Without the index nothing tells what changed: the wait polls until the index is back,
        and at its end answers the list with its `since` kept as the token, so the next wait looks
        at the same changes again."""
        if not check.final:
            return WaitState(None, None, False)
        listed = self.conversations(check.request.selection, use_index)
        listed["changeToken"] = encode_change_token(check.since or UNKNOWN_POSITION)
        return WaitState(None, wait_answer(listed, [], timed_out=True, reset=False), False)

    def _read_directory(self) -> tuple[list[SessionRow], list[str]]:
        """Every session's row, and the ids of those unreadable now."""
        try:
            listing = list_sessions(self.sessions_dir)
        except FileNotFoundError:
            listing = {}
        wanted = []
        for session_id in listing:
            st = lstat_session(self.sessions_dir, session_id)
            if st is not None:
                wanted.append(Wanted(session_id, st.st_size))
        rows: list[SessionRow] = []
        bad: list[str] = []
        for session_id, loaded in load_many(self.sessions_dir, wanted, self.max_session_bytes, self.parse_bytes_in_flight):
            if loaded is None:
                continue
            if loaded.row is None:
                self.unreadable.note(loaded)
                bad.append(session_id)
            else:
                rows.append(loaded.row)
        return rows, bad

    def _last_good_inputs(self, session_id: str, limit: int, start: int | None) -> list[StoredInput] | None:
        def read(conn: sqlite3.Connection) -> list[StoredInput] | None:
            state = queries.session_state(conn, session_id)
            if state is None or not state[0]:
                return None
            return queries.newest_inputs(conn, session_id, limit, start)

        return self._read_index(read)

    def _read_index(self, read: Callable[[sqlite3.Connection], T]) -> T | None:
        """`read` on a read-only connection of its own (never waits for this process's lock), or None."""
        uri = f"file:{urllib.parse.quote(os.fsencode(self.db_path))}?mode=ro"  # any path's bytes
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=_LAST_GOOD_WAIT_SECONDS)
            try:
                return read(conn)
            finally:
                conn.close()
        except sqlite3.Error:
            return None


class SharedPass:
    """Runs `run` for the calls that want its result, one run at a time, shared by every call that
    arrives while a run is awaited. A call never takes the result of a run that began before it
    did (it could miss a change completed before the call): it waits for the next one instead."""

    def __init__(self, run: Callable[[], T]) -> None:
        self._run = run
        self._cond = threading.Condition()
        self._started = 0
        self._finished = 0
        self._running = False
        self._last: tuple[Any, BaseException | None] = (None, None)

    def result(self) -> Any:
        with self._cond:
            need = self._started + 1  # the first run to begin after this call did
            while self._finished < need:
                if not self._running:
                    self._running = True
                    self._started += 1
                    mine = self._started
                    break
                self._cond.wait()
            else:
                return self._outcome()
        outcome: tuple[Any, BaseException | None]
        try:
            outcome = (self._run(), None)
        except BaseException as exc:  # handed to every call that shared this run
            outcome = (None, exc)
        with self._cond:
            self._running = False
            self._finished = mine
            self._last = outcome
            self._cond.notify_all()
            return self._outcome()

    def _outcome(self) -> Any:
        value, error = self._last
        if error is not None:
            raise error
        return value
