"""Answers from the index, made fresh first for exactly what each answer depends on.

- ccweb_list_user_inputs depends on one file. Its signature is compared with the index (and a racy
  one is re-read) on every call, watcher or not.
- ccweb_list_conversations depends on the directory. With a synced watcher (see indexer.watch),
  every change before the call is already in the index. Without one, every file's signature is
  compared (a stat each; reads only for files that moved, are racy, or could not be read now),
  whatever the scope: a session becomes a child not only when it is created (which changes the
  directory) but also when it is rewritten in place to name its source, or when the write that
  creates it truncates first and fills the file afterwards (Node's `fs.writeFile`), and only a
  stat of that file shows either (docs/design.md; the cost is in docs/benchmarks.md).

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

# How long a call waits in all for locks held by other threads of this process (a large initial
# build, a commit, the watcher's batch in flight) before answering from the files instead.
LOCK_WAIT_SECONDS = 5.0


class IndexAnswers:
    def __init__(self, indexer: Indexer, watcher: Callable[[], Watcher | None]) -> None:
        self.indexer = indexer
        self.handle = indexer.handle
        self._watcher = watcher

    def inputs(self, request: InputsRequest) -> dict[str, Any]:
        conversation_id = request.conversation_id
        with self.handle.deadline(LOCK_WAIT_SECONDS):
            self.indexer.ready()
            not_now = self.indexer.refresh([conversation_id]).deferred.get(conversation_id)
            with self.handle.connection() as conn:
                state = queries.session_state(conn, conversation_id)
                if state is None and not_now is None:
                    raise not_found(conversation_id)
                good, error, total = state or (False, None, 0)
                if not good:  # a file that exists but cannot be read now is not "not found"
                    raise unreadable(conversation_id, not_now or error or "unknown reason")
                newest = queries.newest_inputs(conn, conversation_id, request.limit)
        return user_inputs_answer(conversation_id, request.limit, request.max_chars, total, newest)

    def conversations(self, request: ConversationsRequest) -> dict[str, Any]:
        with self.handle.deadline(LOCK_WAIT_SECONDS):
            self.indexer.ready()
            # Outside the lock: concurrent calls share the cookie's round trip.
            if not self._synced():
                self.indexer.reconcile()
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
