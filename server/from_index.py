"""Answers from the index, made fresh first for exactly what each answer depends on.

- ccweb_list_user_inputs depends on one file. Its signature is compared with the index (and a racy
  one is re-read) on every call, watcher or not.
- ccweb_list_conversations depends on the directory. With a synced watcher (see indexer.watch),
  every change before the call is already in the index. Without one, every file's signature is
  compared (a stat each; reads only for files that moved, are racy, or could not be read now),
  whatever the scope, the ids or the filters: a session becomes a child (and joins a tree) not only
  when it is created (which changes the directory) but also when it is rewritten in place to name
  its source, or when the write that creates it truncates first and fills the file afterwards
  (Node's `fs.writeFile`), and only a stat of that file shows either (docs/design.md; the cost is
  in docs/benchmarks.md).

Before either, `Indexer.ready` makes sure the index is the one at the path (indexer.handle). Index
failures come out as the types of indexer.errors, for the service to answer from the files instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccweb_index.indexer.db import read_snapshot
from ccweb_index.indexer.files import dir_identity
from ccweb_index.indexer.refresh import Indexer
from ccweb_index.indexer.watch import Watcher
from ccweb_index.server import queries
from ccweb_index.server.tools import (
    ChangePosition,
    ConversationsRequest,
    InputsRequest,
    WaitRequest,
    conversations_answer,
    not_found,
    unreadable,
    user_inputs_answer,
    wait_answer,
)

# How long a call waits in all for locks held by other threads of this process (a large initial
# build, a commit, the watcher's batch in flight) before answering from the files instead.
LOCK_WAIT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class WaitCheck:
    """One look at the index for a wait (server.waits)."""

    request: WaitRequest
    since: ChangePosition | None  # the request's, or where the wait began; None: nothing known yet
    fresh: bool  # first make the index reflect every change before now, as a list call does
    final: bool  # answer even when nothing changed (time-out, shutdown)


@dataclass(frozen=True, slots=True)
class WaitState:
    position: ChangePosition | None  # where the change sequence stood; None when it could not be read
    answer: dict[str, Any] | None  # the wait's answer, when something changed (or the check was final)
    synced: bool  # a watcher keeps the index current: the wait is woken by changes, it need not poll


class IndexAnswers:
    def __init__(self, indexer: Indexer, watcher: Callable[[], Watcher | None]) -> None:
        self.indexer = indexer
        self.handle = indexer.handle
        self._watcher = watcher

    def inputs(self, request: InputsRequest) -> dict[str, Any]:
        conversation_id = request.conversation_id
        with self.handle.deadline(LOCK_WAIT_SECONDS):
            self.indexer.ready()
            seen = self._seen_for(conversation_id)
            not_now = self.indexer.refresh([conversation_id], seen=seen).deferred.get(conversation_id)
            with self.handle.connection() as conn:
                state = queries.session_state(conn, conversation_id)
                if state is None and not_now is None:
                    raise not_found(conversation_id)
                good, error = state or (False, None)
                if not good:  # a file that exists but cannot be read now is not "not found"
                    raise unreadable(conversation_id, not_now or error or "unknown reason", for_now=not_now is not None)
                start = None if request.start is None else request.start.seq
                newest = queries.newest_inputs(conn, conversation_id, request.limit + 1, start)
        return user_inputs_answer(request, newest)

    def conversations(self, request: ConversationsRequest) -> dict[str, Any]:
        with self.handle.deadline(LOCK_WAIT_SECONDS):
            self._make_fresh()
            with self.handle.connection() as conn:
                position = queries.change_position(conn)  # before the rows: see change_position
                rows = queries.conversations(conn, request, limit=request.limit + 1)
        return conversations_answer(request, rows, position)

    def wait_check(self, check: WaitCheck, use_index: bool = True) -> WaitState:
        """What changed for the wait's selection after `since`, and its answer if anything did."""
        selection = check.request.selection
        with self.handle.deadline(LOCK_WAIT_SECONDS):
            # Without `since`, "now" is read before the freshness proof: a change made after the call
            # began but brought into the index by the proof is after it, and is reported.
            called = self._called_at() if check.since is None and check.fresh else None
            synced = self._make_fresh() if check.fresh else True
            with self.handle.connection() as conn, read_snapshot(conn):
                position = queries.change_position(conn)
                since = check.since or (called if called and called.index_id == position.index_id else position)
                foreign = since.index_id != position.index_id or since.seq > position.seq
                changes = None if foreign else queries.changes_after(conn, since.seq, position.seq)
                reset = changes is None  # another index, a rebuilt one, or older than the log keeps
                changed = [] if changes is None else queries.selected_changes(conn, changes, selection)
                if not (reset or changed or check.final):
                    return WaitState(position, None, synced)
                rows = queries.conversations(conn, selection, limit=selection.limit + 1)
        listed = conversations_answer(selection, rows, position)
        timed_out = not (reset or changed)
        return WaitState(position, wait_answer(listed, changed, timed_out=timed_out, reset=reset), synced)

    def _called_at(self) -> ChangePosition | None:
        """The index's change position as it is, when the index is open and in line with the files
        (else None: the position after the proof stands in). During a first pass it is the pass's
        progress so far: files the pass reads later are reported as changed, which costs the agent
        a look, where a missed change would cost it the whole time-out."""
        if not self.handle.is_open or self.handle.needs_reconcile:
            return None
        with self.handle.connection() as conn:
            return queries.change_position(conn)

    def _make_fresh(self) -> bool:
        """Bring the index in line for a conversations answer; whether a watcher did it. Within the
        caller's deadline."""
        self.indexer.ready()
        # Outside the lock: concurrent calls share the cookie's round trip.
        synced = self._synced()
        if not synced:
            self.indexer.reconcile()
        return synced

    def _seen_for(self, session_id: str) -> dict[str, int] | None:
        """The watcher's word on one file, when it can give it without a cookie (`Watcher.seen_for`)."""
        watcher = self._watcher()
        seen = None if watcher is None else watcher.seen_for(session_id)
        return seen if seen is not None and self._watches_here(watcher) else None

    def _synced(self) -> bool:
        """Whether a watcher proves every change before now is in the index."""
        watcher = self._watcher()
        return watcher is not None and watcher.sync() and self._watches_here(watcher)

    def _watches_here(self, watcher: Watcher | None) -> bool:
        """A watcher proves nothing about a directory it does not watch (the sessions path now leads
        elsewhere). Asked after its proof, so that the path's identity is that of the answer's moment."""
        return watcher is not None and watcher.watched is not None and watcher.watched == dir_identity(self.indexer.sessions_dir)
