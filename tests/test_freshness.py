"""Every answer reflects every change that completed before the call, with and without a watcher.

The cases are the ones in issue #2: in-place rewrite (same inode), atomic replace, creation,
deletion, a same-size rewrite with mtime set back, a racy signature, and a file caught mid-write.
Each runs against the in-process service with and without a watcher, and the main ones through the
real stdio server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.server.service import Service

from conftest import Corpus, hold_the_reader, session, snapshot, stdio_client_for, wait_until

SOURCE = "orch"


def child(*inputs: str, updated: str, **extra: Any) -> dict[str, Any]:
    return session(*inputs, updated=updated, created_from={"kind": "mcp", "sourceSessionId": SOURCE}, **extra)


@pytest.fixture(params=["watcher", "no-watcher", "poll"])
def service(request: pytest.FixtureRequest, corpus: Corpus, db_path: Path) -> Iterator[Service]:
    corpus.write("seed", session("hello", updated="2026-11-01T00:00:00Z"))
    svc = Service(corpus.path, db_path, watch=request.param != "no-watcher", poll=request.param == "poll")
    svc.start()
    if request.param == "watcher":
        from ccweb_index.indexer.watch import InotifyWatcher

        assert isinstance(svc.watcher, InotifyWatcher)

        def no_sweeps() -> None:
            raise AssertionError("a synced watcher must make full reconciles unnecessary")

        svc.indexer.reconcile = no_sweeps  # type: ignore[method-assign]
    yield svc
    svc.close()


def inputs(svc: Service, conversation_id: str) -> list[str]:
    result = svc.call("ccweb_list_user_inputs", {"conversationId": conversation_id}, None)
    assert not result.is_error, result.payload
    return [item["content"] for item in result.payload["inputs"]]


def ids(svc: Service, **arguments: Any) -> list[str]:
    result = svc.call("ccweb_list_conversations", arguments, SOURCE)
    assert not result.is_error, result.payload
    return [row["conversationId"] for row in result.payload["conversations"]]


def test_creation_is_seen_by_both_tools(service: Service, corpus: Corpus) -> None:
    assert ids(service, scope="children") == []
    corpus.write("w1", child("build the api", updated="2026-11-29T08:00:00Z"))
    assert ids(service, scope="children") == ["w1"]
    assert ids(service)[0] == "w1"
    assert inputs(service, "w1") == ["build the api"]


def test_deletion_is_seen_by_both_tools(service: Service, corpus: Corpus) -> None:
    corpus.write("w1", child("x", updated="2026-11-29T08:00:00Z"))
    assert ids(service, scope="children") == ["w1"]
    corpus.delete("w1")
    assert ids(service, scope="children") == []
    assert "w1" not in ids(service)
    result = service.call("ccweb_list_user_inputs", {"conversationId": "w1"}, None)
    assert result.is_error and result.payload["error"]["code"] == "conversation_not_found"


def test_in_place_rewrite_same_inode(service: Service, corpus: Corpus) -> None:
    path = corpus.write("w1", child("first", updated="2026-11-29T08:00:00Z"))
    inode = path.stat().st_ino
    assert inputs(service, "w1") == ["first"]
    corpus.write("w1", child("first", "second", updated="2026-11-29T09:00:00Z", status="Running"), how="inplace")
    assert path.stat().st_ino == inode
    assert inputs(service, "w1") == ["first", "second"]
    rows = service.call("ccweb_list_conversations", {"scope": "children"}, SOURCE).payload["conversations"]
    assert [(r["conversationId"], r["status"], r["userInputCount"]) for r in rows] == [("w1", "running", 2)]


def test_atomic_replace(service: Service, corpus: Corpus) -> None:
    path = corpus.write("w1", child("first", updated="2026-11-29T08:00:00Z"))
    assert inputs(service, "w1") == ["first"]
    inode = path.stat().st_ino
    corpus.write("w1", child("replaced", updated="2026-11-29T09:00:00Z"), how="atomic")
    assert path.stat().st_ino != inode
    assert inputs(service, "w1") == ["replaced"]
    assert ids(service, scope="children") == ["w1"]


def test_same_size_rewrite_with_mtime_set_back(service: Service, corpus: Corpus) -> None:
    path = corpus.write("w1", child("aaaa", updated="2026-11-29T08:00:00Z"))
    before = path.stat()
    assert inputs(service, "w1") == ["aaaa"]
    corpus.write("w1", child("bbbb", updated="2026-11-29T08:00:00Z"), mtime_ns=before.st_mtime_ns)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert inputs(service, "w1") == ["bbbb"]


def test_in_place_edit_of_a_session_outside_the_answer_reorders_all(service: Service, corpus: Corpus) -> None:
    corpus.write("old", session("x", updated="2026-11-20T00:00:00Z"))
    corpus.write("new", session("y", updated="2026-11-28T00:00:00Z"))
    assert ids(service, limit=1) == ["new"]
    corpus.write("old", session("x", updated="2026-11-29T00:00:00Z"), how="inplace")
    assert ids(service, limit=1) == ["old"]


def test_in_place_edit_changes_filtered_answer(service: Service, corpus: Corpus) -> None:
    corpus.write("a", session("x", updated="2026-11-20T00:00:00Z", status="idle"))
    assert "a" not in ids(service, status="done")
    corpus.write("a", session("x", updated="2026-11-20T00:00:00Z", status="done"), how="inplace")
    assert ids(service, status="DONE") == ["a"]


def test_mid_write_file_keeps_its_last_good_version(service: Service, corpus: Corpus) -> None:
    corpus.write("w1", child("good one", updated="2026-11-29T08:00:00Z"))
    assert inputs(service, "w1") == ["good one"]
    corpus.write("w1", b'{"messages": [{"role": "user", "content": "half')
    assert inputs(service, "w1") == ["good one"]
    assert ids(service, scope="children") == ["w1"]
    corpus.write("w1", child("good one", "done", updated="2026-11-29T09:00:00Z"))
    assert inputs(service, "w1") == ["good one", "done"]


def statuses(svc: Service) -> dict[str, str]:
    result = svc.call("ccweb_list_conversations", {"scope": "children"}, SOURCE)
    assert not result.is_error, result.payload
    return {row["conversationId"]: row["status"] for row in result.payload["conversations"]}


def test_a_write_through_another_link_is_seen(service: Service, corpus: Corpus, tmp_path: Path) -> None:
    """A session file with a second link: one outside the directory, or another session's name made
    after the watch began. A write through it raises no inotify event on the session's own name."""
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(child("x", updated="2026-11-29T08:00:00Z", status="idle")))
    os.link(outside, corpus.file("far"))
    corpus.write("near", child("y", updated="2026-11-29T07:00:00Z", status="idle"))
    assert statuses(service) == {"far": "idle", "near": "idle"}
    os.link(corpus.file("near"), corpus.file("twin"))
    assert statuses(service) == {"far": "idle", "near": "idle", "twin": "idle"}
    with open(outside, "r+b") as f:
        f.write(json.dumps(child("x", updated="2026-11-29T08:00:00Z", status="running")).encode())
        f.truncate()
    corpus.write("twin", child("y", updated="2026-11-29T07:00:00Z", status="finished"))
    assert statuses(service) == {"far": "running", "near": "finished", "twin": "finished"}
    # Once the other names are gone, each file is a session with one link again, and still followed.
    outside.unlink()
    corpus.delete("twin")
    corpus.write("far", child("x", updated="2026-11-29T08:00:00Z", status="done"))
    corpus.write("near", child("y", updated="2026-11-29T07:00:00Z", status="done"))
    assert statuses(service) == {"far": "done", "near": "done"}


def test_the_watcher_itself_follows_a_file_with_another_link(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    """Without any call: waits are woken by what the watcher indexes, so it must look at such a file
    on its own."""
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(child("x", updated="2026-11-29T08:00:00Z", status="idle")))
    os.link(outside, corpus.file("far"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        corpus.write("near", child("y", updated="2026-11-29T07:00:00Z"))
        assert statuses(svc) == {"far": "idle", "near": "idle"}
        watcher = svc.watcher
        assert watcher is not None and wait_until(lambda: watcher.seen_for("near") is not None)
        assert watcher.seen_for("far") is None  # a one-file call checks it by its own lstat and rules
        with open(outside, "r+b") as f:
            f.write(json.dumps(child("x", updated="2026-11-29T08:00:00Z", status="running")).encode())
            f.truncate()

        def indexed_status() -> str:
            with contextlib.closing(sqlite3.connect(db_path)) as conn:
                return str(conn.execute("SELECT status FROM sessions WHERE id = 'far'").fetchone()[0])

        assert wait_until(lambda: indexed_status() == "running")
    finally:
        svc.close()


def test_unreadable_from_the_start_is_an_error_and_left_out(service: Service, corpus: Corpus) -> None:
    corpus.write("bad", b'{"messages": [')
    result = service.call("ccweb_list_user_inputs", {"conversationId": "bad"}, None)
    assert result.is_error and result.payload["error"]["code"] == "conversation_unreadable"
    assert "bad" not in ids(service)


def test_racy_signature_is_reread(corpus: Corpus, db_path: Path) -> None:
    """git's racy-clean case: a change that leaves the stat signature as it was.

    The kernel cannot be made to do that on demand, so the test makes the index believe it: the
    stored signature is set to the file's current one after a same-size rewrite. Marked racy, the
    entry is read again; marked settled, the stale content would be served (the control case).
    """
    corpus.write("w1", session("aaaa", updated="2026-11-29T08:00:00Z"))
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        assert inputs(svc, "w1") == ["aaaa"]
        corpus.write("w1", session("bbbb", updated="2026-11-29T08:00:00Z"))
        st = corpus.file("w1").stat()
        conn = sqlite3.connect(db_path)
        with conn:
            conn.execute(
                "UPDATE sessions SET ino = ?, size = ?, mtime_ns = ?, ctime_ns = ?, racy = 0 WHERE id = 'w1'",
                (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
            )
        assert inputs(svc, "w1") == ["aaaa"], "control: a settled signature is trusted"
        with conn:
            conn.execute("UPDATE sessions SET racy = 1 WHERE id = 'w1'")
        conn.close()
        assert inputs(svc, "w1") == ["bbbb"]
    finally:
        svc.close()


def test_a_freshly_written_file_is_recorded_racy(corpus: Corpus, db_path: Path) -> None:
    corpus.write("w1", session("x"))
    svc = Service(corpus.path, db_path)
    svc.start()
    svc.close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT racy > 0 FROM sessions WHERE id = 'w1'").fetchone() == (1,)  # racy: when it was read


@contextlib.contextmanager
def watched(corpus: Corpus, db_path: Path) -> Iterator[tuple[Service, Any]]:
    """A started service over a corpus of one session, with its inotify watcher."""
    from ccweb_index.indexer.watch import InotifyWatcher

    corpus.write("seed", session("hello", updated="2026-11-01T00:00:00Z"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        assert isinstance(svc.watcher, InotifyWatcher)
        yield svc, svc.watcher
    finally:
        svc.close()


@contextlib.contextmanager
def _released(held: tuple[threading.Event, threading.Event]) -> Iterator[tuple[threading.Event, threading.Event]]:
    try:
        yield held
    finally:
        held[1].set()  # else the held reader would hold up the service's close


def test_a_change_the_reader_is_still_handling_is_waited_for(corpus: Corpus, db_path: Path) -> None:
    """A call skips the watcher's cookie only when nothing can be pending (docs/design.md, "When no
    cookie is needed"). Here the reader thread has read a change's events and is stuck handling
    them: the kernel queue is empty, and the call must still wait for the change."""
    with watched(corpus, db_path) as (svc, watcher), _released(hold_the_reader(watcher, "w1")) as (handling, release):
        assert ids(svc, scope="children") == []
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert handling.wait(5), "the reader never handled the write"
        # From watchdog 7.1.1 on, the thread that reads the kernel queue is not the one handling
        # what it read: it goes back to its wait, parked with the kernel queue empty, meanwhile.
        time.sleep(0.05)
        assert not watcher.drained(), "a change being handled counted as handled"
        threading.Timer(0.3, release.set).start()  # the call must not answer before this
        assert ids(svc, scope="children") == ["w1"]


def test_a_reader_that_fails_is_replaced_by_polling(
    corpus: Corpus, db_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inotify reader runs watchdog's code, which can fail in a release we have not seen (7.1.1
    called a method our callbacks lacked, and passed our reader an argument it did not take). Its
    thread then ended in a traceback, and every call waited for a cookie nobody would read until
    the timeout. Now the failure is one line, calls do not wait on the dead reader, and the
    supervisor polls the directory from then on."""
    from ccweb_index.indexer.watch import PollingWatcher

    tracebacks: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: tracebacks.append(args.exc_value))
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    with watched(corpus, db_path) as (svc, watcher):

        def broken(event: Any) -> None:
            raise RuntimeError("a release we have not seen")

        watcher._callbacks.sessions._handle = broken
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert wait_until(lambda: not watcher.running)
        cookies = watcher.cookies_sent
        assert ids(svc, scope="children") == ["w1"]
        assert watcher.cookies_sent == cookies, "the call sent a cookie to the dead reader, and waited"
        assert wait_until(lambda: isinstance(svc.watcher, PollingWatcher))
        corpus.write("w2", child("two", updated="2026-11-29T09:00:00Z"))
        assert ids(svc, scope="children") == ["w2", "w1"]
    assert tracebacks == []
    messages = [r.getMessage() for r in caplog.records]
    assert sum("the inotify reader stopped (RuntimeError: a release we have not seen)" in m for m in messages) == 1
    assert sum("polling the sessions directory" in m for m in messages) == 1, messages


def test_a_call_waiting_for_its_cookie_when_the_reader_fails_goes_on_at_once(
    corpus: Corpus, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The reader's failure released nobody: a call waiting for its cookie waited until the
    supervisor's next look, or out the cookie's whole time-out (a review). The supervisor is kept
    from looking here, so only the failure itself can release the call."""
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    with watched(corpus, db_path) as (svc, watcher):
        assert svc._supervisor is not None
        svc._supervisor.keep_watcher = lambda: None  # type: ignore[method-assign]
        watcher._inotify._proves = False  # every call sends a cookie

        def broken(event: Any) -> None:
            raise RuntimeError("a release we have not seen")

        watcher._callbacks.cookie._handle = broken
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert ids(svc, scope="children") == ["w1"]
        assert watcher.broke and not watcher.running
    said = [r.getMessage() for r in caplog.records]
    assert any("the inotify reader stopped" in m for m in said), said
    assert not any("did not see its cookie" in m for m in said), said


def test_a_watchdog_release_not_known_here_always_sends_a_cookie(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`drained` rests on watchdog's private structure, known only for some releases; a review made a
    7.1.1 with one attribute renamed, which passed for 7.1.0's way and answered stale 219 times in
    124,347 calls. Any other release proves freshness by cookies alone."""
    from ccweb_index.indexer import inotify_reader

    monkeypatch.setattr(inotify_reader, "KNOWN_RELEASES", {}, raising=False)
    with watched(corpus, db_path) as (svc, watcher):
        time.sleep(0.2)  # quiet: a known release would be drained by now
        assert not watcher.drained()
        cookies = watcher.cookies_sent
        assert ids(svc) == ["seed"]
        assert watcher.cookies_sent == cookies + 1
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert ids(svc, scope="children") == ["w1"]


def test_a_failure_the_dispatcher_recorded_is_the_reader_s(corpus: Corpus, db_path: Path) -> None:
    """watchdog 7.1.1's dispatcher records its failure and stops the watches before the reader
    raises it: in between, the watcher looked stopped for a directory change (a new inotify watcher,
    a full reconcile, and the log said the directory changed), not broken (a review)."""
    with watched(corpus, db_path) as (svc, watcher):
        assert not watcher.broke
        watcher._inotify._dispatch_error = RuntimeError("recorded, not raised yet")
        assert watcher.broke


def test_a_read_is_handed_on_at_once(corpus: Corpus, db_path: Path) -> None:
    """watchdog 7.1.1 holds a read that comes within a millisecond of the previous one for up to a
    millisecond more, to gather a burst; a cookie's event is such a read whenever anything changed
    just before, and the call waited (a cookie's round trip went from 26 µs to 1.2 ms,
    docs/benchmarks.md). The reader must never wait for more before handing a read on: its only
    wait is the one for the next read, which has no timeout."""
    with watched(corpus, db_path) as (svc, watcher):
        reader = watcher._inotify
        wait = reader._check_inotify_fd
        bounded: list[int] = []

        def counted(*args: Any, **kwargs: Any) -> bool:
            timeout_ms = args[0] if args else kwargs.get("timeout_ms")
            if timeout_ms is not None:
                bounded.append(timeout_ms)
            return bool(wait(*args, **kwargs))

        reader._check_inotify_fd = counted
        for n in range(200):  # a session written again and again, a cookie right after each write
            corpus.write("hot", session(f"edit {n}", updated="2026-11-29T08:00:00Z"))
            assert watcher._cookie_round_trip()
        assert inputs(svc, "hot") == ["edit 199"]
    assert bounded == [], f"the reader waited for more {len(bounded)} times"


def test_a_quiet_watcher_needs_no_cookie(corpus: Corpus, db_path: Path) -> None:
    """With nothing queued and nothing being handled, a call proves freshness without a cookie; a
    change makes the next call's proof the cookie's again (or the reader's, once it has handled it)."""
    with watched(corpus, db_path) as (svc, watcher):
        assert wait_until(watcher.drained)
        cookies = watcher.cookies_sent
        for _ in range(3):
            assert ids(svc) == ["seed"]
        assert watcher.cookies_sent == cookies
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert ids(svc, scope="children") == ["w1"]


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_freshness_through_the_stdio_server(corpus: Corpus, db_path: Path, watch: bool) -> None:
    corpus.write("seed", session("hello", updated="2026-11-01T00:00:00Z"))
    args = () if watch else ("--no-watch",)
    with stdio_client_for(corpus.path, db_path, source=SOURCE, args=args) as client:

        def children() -> list[str]:
            payload, is_error = client.call("ccweb_list_conversations", {"scope": "children"})
            assert not is_error
            return [row["conversationId"] for row in payload["conversations"]]

        def first_of_all() -> str:
            payload, _ = client.call("ccweb_list_conversations", {"limit": 1})
            return payload["conversations"][0]["conversationId"]

        def user_inputs(conversation_id: str) -> list[str]:
            payload, is_error = client.call("ccweb_list_user_inputs", {"conversationId": conversation_id})
            assert not is_error, payload
            return [item["content"] for item in payload["inputs"]]

        assert children() == []
        corpus.write("w1", child("one", updated="2026-11-29T08:00:00Z"))
        assert children() == ["w1"] and user_inputs("w1") == ["one"]
        corpus.write("w1", child("one", "two", updated="2026-11-29T08:00:00Z"), how="inplace")
        assert user_inputs("w1") == ["one", "two"]
        corpus.write("w1", child("three", updated="2026-11-29T08:00:00Z"), how="atomic")
        assert user_inputs("w1") == ["three"]
        corpus.write("seed", session("hello", updated="2026-11-30T00:00:00Z"), how="inplace")
        assert first_of_all() == "seed"
        corpus.delete("w1")
        assert children() == []


def test_the_sessions_directory_is_never_written(corpus: Corpus, db_path: Path) -> None:
    corpus.write("seed", session("hello"))
    corpus.write("kid", child("hi", updated="2026-11-29T08:00:00Z"))
    corpus.write("bad", b"{")
    before = snapshot(corpus.path)
    for watch in (True, False):
        svc = Service(corpus.path, db_path, watch=watch)
        svc.start()
        for _ in range(3):
            svc.call("ccweb_list_conversations", {"scope": "children"}, SOURCE)
            svc.call("ccweb_list_conversations", {}, SOURCE)
            svc.call("ccweb_list_user_inputs", {"conversationId": "kid"}, None)
            svc.call("ccweb_list_user_inputs", {"conversationId": "bad"}, None)
        svc.close()
    with stdio_client_for(corpus.path, db_path, source=SOURCE) as client:
        client.call("ccweb_list_conversations", {"scope": "children"})
        client.call("ccweb_list_user_inputs", {"conversationId": "seed"})
    assert snapshot(corpus.path) == before


def _reads_of_calls(svc: Service) -> list[int]:
    """How many files each later refresh read (the inputs call's one-file look)."""
    reads: list[int] = []
    refresh = svc.indexer.refresh

    def counted(*args: Any, **kwargs: Any) -> Any:
        stats = refresh(*args, **kwargs)
        reads.append(stats.read)
        return stats

    svc.indexer.refresh = counted  # type: ignore[method-assign]
    return reads


def test_a_quiet_watcher_vouches_for_a_racy_row(corpus: Corpus, db_path: Path) -> None:
    """A file written just now is racy, and a call about it alone would read it again every time
    (a hot session is racy at nearly every call). A watcher with nothing queued, nothing being
    handled and no change of the file left to apply proves what the read would (docs/design.md,
    "One file's answer and the watcher"); a change still brings the new content."""
    from ccweb_index.indexer.watch import InotifyWatcher

    corpus.write("w1", session("aaaa", updated="2026-11-29T08:00:00Z"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        assert isinstance(svc.watcher, InotifyWatcher)
        conn = sqlite3.connect(db_path)
        assert conn.execute("SELECT racy > 0 FROM sessions WHERE id = 'w1'").fetchone() == (1,)
        reads = _reads_of_calls(svc)
        assert wait_until(svc.watcher.drained)
        for _ in range(3):
            assert inputs(svc, "w1") == ["aaaa"]
        assert reads == [0, 0, 0], "a racy row the watcher vouches for is read again"
        corpus.write("w1", session("bbbb", updated="2026-11-29T08:00:00Z"))
        assert inputs(svc, "w1") == ["bbbb"]
        # Read before the watch began: the watcher cannot vouch for it.
        # The watcher's own apply of that write counts here too: let it end first (it holds
        # `applying` from taking the batch to its commit).
        assert wait_until(lambda: svc.watcher.seen_for("w1") is not None)
        with svc.watcher.dirty.applying:
            pass
        with conn:
            conn.execute("UPDATE sessions SET racy = 1 WHERE id = 'w1'")
        conn.close()
        reads.clear()
        assert inputs(svc, "w1") == ["bbbb"] and reads == [1]
    finally:
        svc.close()


def test_a_change_the_watcher_has_not_applied_is_read(corpus: Corpus, db_path: Path) -> None:
    """The same racy row while the reader is still handling a change of it: the watcher vouches for
    nothing, and the call reads the file, even when its signature looks unchanged (forged here, as
    in test_racy_signature_is_reread)."""
    from ccweb_index.indexer.watch import InotifyWatcher

    corpus.write("w1", session("aaaa", updated="2026-11-29T08:00:00Z"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    release = threading.Event()
    try:
        watcher = svc.watcher
        assert isinstance(watcher, InotifyWatcher)
        assert inputs(svc, "w1") == ["aaaa"]
        handling, release = hold_the_reader(watcher, "w1")  # the reader holds the first event of the write
        corpus.write("w1", session("bbbb", updated="2026-11-29T08:00:00Z"))
        assert handling.wait(5), "the reader never handled the write"
        st = corpus.file("w1").stat()
        conn = sqlite3.connect(db_path)
        with conn:  # the index now believes its version is the file's, read just now
            conn.execute(
                "UPDATE sessions SET ino = ?, size = ?, mtime_ns = ?, ctime_ns = ?, racy = ? WHERE id = 'w1'",
                (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, time.time_ns()),
            )
        conn.close()
        assert inputs(svc, "w1") == ["bbbb"]
    finally:
        release.set()
        svc.close()
