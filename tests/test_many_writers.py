"""Defects the hardening (issue #5) found in the indexer, each with the test that showed it: several
processes writing one index, a call that changes nothing, and the reason given for a lone surrogate.
The last two (a deleted session brought back by a late commit, a clock stepped back) were fixed after
c0afab3: a read of the file's current state is always kept, and a forgotten row stays forgotten while
the file is gone.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.server.service import Service

from conftest import Corpus, session
from faults import cli

CONVERSATIONS = "ccweb_list_conversations"


def rows(svc: Service) -> list[tuple[str, str]]:
    result = svc.call(CONVERSATIONS, {}, None)
    assert not result.is_error
    return [(row["conversationId"], row["updatedAt"]) for row in result.payload["conversations"]]


class PausedWriter:
    """A second process's indexer (a Service of its own on the same index), paused between reading
    files and committing what it read: what a slow or descheduled process does."""

    def __init__(self, corpus: Corpus, db: Path) -> None:
        self.svc = Service(corpus.path, db)
        self.svc.start()
        self.entered = threading.Event()
        self.gate = threading.Event()
        real = self.svc.indexer._write

        def paused(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.gate.wait(30)
            return real(*args, **kwargs)

        self.svc.indexer._write = paused  # type: ignore[method-assign]
        self.thread: threading.Thread | None = None

    def look_at(self, session_id: str) -> None:
        self.thread = threading.Thread(target=self.svc.call, args=("ccweb_list_user_inputs", {"conversationId": session_id}, None))
        self.thread.start()
        assert self.entered.wait(30)

    def commit(self) -> None:
        self.gate.set()
        assert self.thread is not None
        self.thread.join(30)
        self.svc.close()


def test_a_late_commit_of_an_older_read_does_not_replace_a_newer_row(corpus: Corpus, db_path: Path) -> None:
    """Two processes on one index (a watch daemon and servers, issue #3): process S reads version 1
    of a session, process H reads version 2 and commits it, then S commits version 1 over it. H's
    watcher has already applied its event, so H's synced answers keep version 1 until the session
    changes again. Seen in the shared-index load run (docs/reliability.md)."""
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    corpus.write("y", session("y", updated="2026-11-05T00:00:00Z"))
    h = Service(corpus.path, db_path, watch=True)
    h.start()
    try:
        other = PausedWriter(corpus, db_path)
        corpus.write("x", session("v1", updated="2026-11-02T00:00:00Z"))
        other.look_at("x")  # has read version 1, not committed yet
        corpus.write("x", session("v2", updated="2026-11-09T00:00:00Z"), how="atomic")
        assert rows(h) == [("x", "2026-11-09T00:00:00.000Z"), ("y", "2026-11-05T00:00:00.000Z")]
        other.commit()
        assert rows(h) == [("x", "2026-11-09T00:00:00.000Z"), ("y", "2026-11-05T00:00:00.000Z")]
    finally:
        h.close()


def test_a_late_forget_does_not_remove_a_recreated_session(corpus: Corpus, db_path: Path) -> None:
    """The same race for a deletion: S sees the file gone; it is created again and H indexes it; then
    S commits the deletion, and H's synced answers leave the session out."""
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    corpus.write("y", session("y", updated="2026-11-05T00:00:00Z"))
    h = Service(corpus.path, db_path, watch=True)
    h.start()
    try:
        other = PausedWriter(corpus, db_path)
        corpus.delete("x")
        other.look_at("x")  # has seen it gone, not committed yet
        corpus.write("x", session("again", updated="2026-11-09T00:00:00Z"))
        assert [r[0] for r in rows(h)] == ["x", "y"]
        other.commit()
        assert [r[0] for r in rows(h)] == ["x", "y"]
    finally:
        h.close()


def test_a_call_that_changes_nothing_does_not_write_the_index(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a watcher, every scope "all" call reconciles, and `_record_listing` then writes the
    meta row unconditionally: a write transaction per call. Under another process's write lock each
    such call waits the busy timeout and falls back to reading every file, though the index is
    readable and current."""
    from test_broken_index import hold_lock

    from ccweb_index.indexer import db as dbmod

    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_MS", 200)
    corpus.write("a", session("x", updated="2026-11-01T00:00:00Z"), mtime_ns=1_700_000_000_000_000_000)
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        import time

        time.sleep(2.1)  # past the racy window: nothing needs reading again
        rows(svc)
        holder = hold_lock(db_path, 3)
        try:
            caplog.set_level(logging.WARNING, logger="ccweb_index")
            assert rows(svc) == [("a", "2026-11-01T00:00:00.000Z")]
        finally:
            holder.wait(30)
        assert not [r for r in caplog.records if "is locked" in r.getMessage()], "a call with nothing to write waited for the lock"
    finally:
        svc.close()


def test_the_reason_given_for_a_lone_surrogate_names_it(corpus: Corpus, db_path: Path) -> None:
    corpus.write("lone", b'{"title": "\\ud800"}')
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(db_path)).returncode == 0
    status = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db_path)).stdout
    assert "unreadable lone.json: invalid JSON: " in status
    assert "surrogate" in status, status


@pytest.mark.parametrize("tool", ["conversations", "inputs"])
def test_a_file_changed_again_before_the_commit_is_not_answered_older(corpus: Corpus, db_path: Path, tool: str) -> None:
    """One process, no watcher. Version 1 is written before the call; the call reads it; version 2 lands
    between that read and the commit. The answer may show version 1 or 2 (both existed during the
    call), never version 0, which was gone before the call started."""
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        corpus.write("x", session("v0", "v1", updated="2026-11-02T00:00:00Z"))
        real = svc.indexer._write
        pending = [1]

        def change_then_commit(*args: Any, **kwargs: Any) -> Any:
            if pending:
                pending.pop()
                corpus.write("x", session("v0", "v1", "v2", updated="2026-11-03T00:00:00Z"))
            return real(*args, **kwargs)

        svc.indexer._write = change_then_commit  # type: ignore[method-assign]
        if tool == "conversations":
            answer = rows(svc)[0][1]
            assert answer in ("2026-11-02T00:00:00.000Z", "2026-11-03T00:00:00.000Z"), answer
        else:
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "x"}, None)
            contents = [i["content"] for i in result.payload["inputs"]]
            assert contents in (["v0", "v1"], ["v0", "v1", "v2"]), contents
        assert not pending
    finally:
        svc.close()


def test_a_late_commit_does_not_bring_back_a_deleted_session(corpus: Corpus, db_path: Path) -> None:
    """S reads a session; it is deleted; H sees it gone and forgets it; then S commits its read. The
    row has no newer state to lose to, so ctime order lets it in, and H's synced answers list a
    session that no longer exists (no later event will ever correct it)."""
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    corpus.write("y", session("y", updated="2026-11-05T00:00:00Z"))
    h = Service(corpus.path, db_path, watch=True)
    h.start()
    try:
        other = PausedWriter(corpus, db_path)
        corpus.write("x", session("v1", updated="2026-11-02T00:00:00Z"))
        other.look_at("x")  # has read version 1, not committed yet
        corpus.delete("x")
        assert [r[0] for r in rows(h)] == ["y"]
        other.commit()
        assert [r[0] for r in rows(h)] == ["y"]
    finally:
        h.close()


def test_a_clock_stepped_back_does_not_freeze_a_session(corpus: Corpus, db_path: Path) -> None:
    """ctime comes from the wall clock, which NTP or an operator can step back: a file's next state
    then carries a smaller ctime than the one recorded. The row is made to look like that (recorded
    an hour "in the future"), as a test cannot step the machine's clock. Every look reads the file
    again (its signature differs) and is refused, so the old version is answered until the clock
    catches up."""
    import sqlite3

    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        conn = sqlite3.connect(db_path)
        with conn:
            conn.execute("UPDATE sessions SET ctime_ns = ctime_ns + 3600 * 1000000000, racy = 0 WHERE id = 'x'")
        conn.close()
        corpus.write("x", session("v0", "v1", updated="2026-11-02T00:00:00Z"))
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "x"}, None)
        assert [i["content"] for i in result.payload["inputs"]] == ["v0", "v1"]
        assert rows(svc) == [("x", "2026-11-02T00:00:00.000Z")]
    finally:
        svc.close()
