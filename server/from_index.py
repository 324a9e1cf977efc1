"""Answers from the index, made fresh first for exactly what each answer depends on.

- ccweb_list_user_inputs depends on one file. Its signature is compared with the index (and a racy
  one is re-read) on every call, watcher or not.
- ccweb_list_conversations depends on the directory. With a synced watcher (see indexer.watch),
  every change before the call is already in the index. Without one, the directory's own signature
  reveals files added, removed or replaced; for scope "children" and "descendants" the answer's
  files (the children, or the whole tree) are then re-checked (a session joins a tree when it is
  created, which changes the directory); with conversationIds, those files are; for scope "all"
  and for filters, where an in-place edit of any file can change the answer, every file's
  signature is compared (a stat each, no reads).

Before either, `Indexer.ready` makes sure the index is the one at the path (indexer.handle). Index
failures come out as the types of indexer.errors, for the service to answer from the files instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ccweb_index.indexer.files import dir_identity
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.watch import Watcher
from ccweb_index.server import queries
from ccweb_index.server.tools import (
    ConversationsRequest,
    InputsRequest,
    conversations_answer,
    not_found,
    unreadable,
    user_inputs_answer,
)

# How long a call waits for another thread of this process to finish with the index (e.g. a large
# initial build) before answering from the files instead.
LOCK_WAIT_SECONDS = 5.0


class IndexAnswers:
    def __init__(self, indexer: Indexer, watcher: Callable[[], Watcher | None]) -> None:
        self.indexer = indexer
        self.handle = indexer.handle
        self._watcher = watcher

    def inputs(self, request: InputsRequest) -> dict[str, Any]:
        conversation_id = request.conversation_id
        with self.handle.locked(LOCK_WAIT_SECONDS):
            self.indexer.ready()
            self.indexer.refresh([conversation_id])
            with self.handle.connection() as conn:
                state = queries.session_state(conn, conversation_id)
                if state is None:
                    raise not_found(conversation_id)
                good, error = state
                if not good:
                    raise unreadable(conversation_id, error or "unknown reason")
                start = None if request.start is None else request.start.seq
                newest = queries.newest_inputs(conn, conversation_id, request.limit + 1, start)
        return user_inputs_answer(request, newest)

    def conversations(self, request: ConversationsRequest) -> dict[str, Any]:
        with self.handle.locked(LOCK_WAIT_SECONDS):
            self.indexer.ready()
        # The cookie round trip happens outside the lock, so concurrent calls share the wait.
        synced = self._synced()
        with self.handle.locked(LOCK_WAIT_SECONDS):
            if not synced:
                self._check_files(request)
            with self.handle.connection() as conn:
                rows = queries.conversations(conn, request, limit=request.limit + 1)
        return conversations_answer(request, rows)

    def _synced(self) -> bool:
        """Whether a watcher proves every change before now is in the index. It proves nothing about
        a directory it does not watch (the sessions path now leads elsewhere)."""
        watcher = self._watcher()
        return (
            watcher is not None
            and watcher.sync()
            and watcher.watched is not None
            and watcher.watched == dir_identity(self.indexer.sessions_dir)
        )

    def _check_files(self, request: ConversationsRequest) -> None:
        """Without a synced watcher: compare the signatures of every file the answer could depend on."""
        if request.ids is not None:
            self.indexer.refresh(request.ids)
            if request.scope != "descendants":  # a row's own file says whether it is a child
                return
        if request.scope == "all":
            self.indexer.reconcile()
            return
        self.indexer.refresh_listing()
        tree = queries.children_ids if request.scope == "children" else queries.descendant_ids
        assert request.source is not None
        with self.handle.connection() as conn:
            members = tree(conn, request.source)
        self.indexer.refresh(members)
