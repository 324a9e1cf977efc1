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
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.db import open_index, resolve_db_path
from indexer.files import DEFAULT_MAX_SESSION_BYTES
from indexer.refresh import Indexer
from indexer.watch import Watcher, start_watcher
from server import queries
from server.tools import (
    CONVERSATIONS_LIMIT,
    INPUTS_LIMIT,
    INPUTS_MAX_CHARS,
    LIST_CONVERSATIONS,
    LIST_USER_INPUTS,
    ToolError,
    clamp_int,
    conversation_row,
    filter_key,
    missing_source_for_children,
    not_found,
    requested_conversation,
    unreadable,
    user_inputs_answer,
    valid_source,
)

log = logging.getLogger("ccweb_index")


@dataclass(frozen=True, slots=True)
class ToolResult:
    payload: dict[str, Any]
    is_error: bool

    def text(self) -> str:
        return json.dumps(self.payload, ensure_ascii=False, separators=(",", ":"))


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
        self.conn = open_index(self.db_path, self.sessions_dir)
        self.indexer = Indexer(self.sessions_dir, self.conn, max_session_bytes=max_session_bytes)
        self.watcher: Watcher | None = None
        self._want_watch = watch
        self._poll = poll
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Bring the index in line (and start the watcher). Calls made meanwhile wait for it."""
        with self.indexer.lock:
            if self._closed:
                return
            if self._want_watch and os.path.isdir(self.sessions_dir):
                self.watcher = start_watcher(self.indexer, poll=self._poll)
            else:
                self.indexer.reconcile()

    def start_in_background(self) -> None:
        # Take the lock before returning, so no call can slip in ahead of the first reconcile.
        ready = threading.Event()

        def run() -> None:
            with self.indexer.lock:
                ready.set()
                try:
                    self.start()
                except Exception:
                    log.exception("initial indexing failed; calls will index what they need")

        threading.Thread(target=run, name="ccweb-index-start", daemon=True).start()
        ready.wait()

    def close(self) -> None:
        with self.indexer.lock:  # waits for a start in progress; no start begins after this
            self._closed = True
            watcher, self.watcher = self.watcher, None
        # Stopped outside the lock: the watcher's applier may be waiting for it.
        if watcher is not None:
            watcher.stop()
        with self.indexer.lock:
            self.conn.close()

    def counts(self) -> dict[str, object]:
        with self.indexer.lock:
            return queries.counts(self.conn)

    def unreadable(self) -> list[tuple[str, str, bool]]:
        with self.indexer.lock:
            return queries.unreadable(self.conn)

    # --- the tools ------------------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | None, source: str | None) -> ToolResult:
        arguments = arguments if isinstance(arguments, dict) else {}
        try:
            if name == LIST_USER_INPUTS:
                return ToolResult(self.list_user_inputs(arguments, source), False)
            if name == LIST_CONVERSATIONS:
                return ToolResult(self.list_conversations(arguments, source), False)
            raise ToolError(
                "unknown_tool", f"There is no tool {name!r}; the tools are {LIST_USER_INPUTS} and {LIST_CONVERSATIONS}."
            )
        except ToolError as exc:
            return ToolResult(exc.payload(), True)

    def list_user_inputs(self, arguments: dict[str, Any], source: str | None) -> dict[str, Any]:
        conversation_id = requested_conversation(arguments, source)
        limit = clamp_int(arguments.get("limit"), INPUTS_LIMIT)
        max_chars = clamp_int(arguments.get("maxChars"), INPUTS_MAX_CHARS)
        with self.indexer.lock:
            self.indexer.refresh([conversation_id])
            state = queries.session_state(self.conn, conversation_id)
            if state is None:
                raise not_found(conversation_id)
            good, error, total = state
            if not good:
                raise unreadable(conversation_id, error or "unknown reason")
            newest = queries.newest_inputs(self.conn, conversation_id, limit)
        return user_inputs_answer(conversation_id, limit, max_chars, total, newest)

    def list_conversations(self, arguments: dict[str, Any], source: str | None) -> dict[str, Any]:
        source = valid_source(source)
        children = arguments.get("scope") == "children"
        if children and source is None:
            raise missing_source_for_children()
        limit = clamp_int(arguments.get("limit"), CONVERSATIONS_LIMIT)
        agent_key = filter_key(arguments.get("agent"))
        status_key = filter_key(arguments.get("status"))

        def query() -> list[Any]:
            return queries.conversations(
                self.conn,
                children_of=source if children else None,
                agent_key=agent_key,
                status_key=status_key,
                limit=limit + 1,
            )

        # The cookie round trip happens outside the lock, so concurrent calls share the wait.
        synced = self.watcher is not None and self.watcher.sync()
        with self.indexer.lock:
            if not synced:
                self._check_files(children_of=source if children else None)
            rows = query()
        return {
            "scope": "children" if children else "all",
            "sourceConversationId": source,
            "limit": limit,
            "returnedCount": min(len(rows), limit),
            "hasMore": len(rows) > limit,
            "conversations": [conversation_row(row) for row in rows[:limit]],
        }

    def _check_files(self, *, children_of: str | None) -> None:
        """Without a synced watcher: compare the signatures of every file the answer could depend on."""
        if children_of is None:
            self.indexer.reconcile()
            return
        self.indexer.refresh_listing()
        self.indexer.refresh(queries.children_ids(self.conn, children_of))
