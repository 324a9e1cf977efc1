"""Answers from the session files directly, for when the index cannot be used (docs/reliability.md).

They are made with the same code that fills the index (`indexer.load`) and select and order as the
index's queries do (`server.queries.select`), so the answer is the same. A file
that is unreadable now stands in with its last good version, read from the index on a read-only
connection of its own when the index is still readable.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ccweb_index.indexer.files import list_sessions, lstat_session
from ccweb_index.indexer.load import UnreadableLog, load_many, load_session
from ccweb_index.indexer.row import SessionRow
from ccweb_index.server import queries
from ccweb_index.server.tools import (
    ConversationsRequest,
    InputsRequest,
    StoredInput,
    conversations_answer,
    not_found,
    unreadable,
    user_inputs_answer,
)

T = TypeVar("T")

# How long the read-only look at the index for last good versions waits for a lock: it is optional.
_LAST_GOOD_WAIT_SECONDS = 0.2


class FileAnswers:
    def __init__(self, sessions_dir: str, db_path: Path, max_session_bytes: int, unreadable: UnreadableLog) -> None:
        self.sessions_dir = sessions_dir
        self.db_path = db_path
        self.max_session_bytes = max_session_bytes
        self.unreadable = unreadable

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
            newest = [StoredInput(*item) for item in reversed(loaded.inputs[max(0, end - request.limit - 1) : end])]
        else:
            self.unreadable.note(loaded)
            good = self._last_good_inputs(conversation_id, request.limit + 1, start) if use_index else None
            if good is None:
                raise unreadable(conversation_id, loaded.error)
            newest = good
        return user_inputs_answer(request, newest)

    def conversations(self, request: ConversationsRequest, use_index: bool) -> dict[str, Any]:
        try:
            listing = list_sessions(self.sessions_dir)
        except FileNotFoundError:
            listing = {}
        wanted = []
        for session_id in listing:
            st = lstat_session(self.sessions_dir, session_id)
            if st is not None:
                wanted.append((session_id, st.st_size))
        rows: list[SessionRow] = []
        bad: list[str] = []
        for session_id, loaded in load_many(self.sessions_dir, wanted, self.max_session_bytes):
            if loaded is None:
                continue
            if loaded.row is None:
                self.unreadable.note(loaded)
                bad.append(session_id)
            else:
                rows.append(loaded.row)
        if bad and use_index:
            rows += self._read_index(lambda conn: queries.good_rows(conn, bad)) or []
        return conversations_answer(request, queries.select(rows, request)[: request.limit + 1])

    def _last_good_inputs(self, session_id: str, limit: int, start: int | None) -> list[StoredInput] | None:
        def read(conn: sqlite3.Connection) -> list[StoredInput] | None:
            state = queries.session_state(conn, session_id)
            if state is None or not state[0]:
                return None
            return queries.newest_inputs(conn, session_id, limit, start)

        return self._read_index(read)

    def _read_index(self, read: Callable[[sqlite3.Connection], T]) -> T | None:
        """`read` on a read-only connection of its own (never waits for this process's lock), or None."""
        uri = f"file:{urllib.parse.quote(str(self.db_path))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=_LAST_GOOD_WAIT_SECONDS)
            try:
                return read(conn)
            finally:
                conn.close()
        except sqlite3.Error:
            return None
