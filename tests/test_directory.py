"""The sessions directory itself (issue #5): missing at start, deleted and recreated, renamed, replaced
by a symlink while watched; inotify unavailable or out of watches; the event queue overflowing.

In every case the answers are those for what the sessions path holds at the time of the call. With a
watcher, the service also goes back to a synced watcher on the directory the path leads to now; that
the new watcher really is synced is shown by answering a change with full sweeps forbidden.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer.files import dir_identity
from ccweb_index.indexer.watch import InotifyWatcher, PollingWatcher
from ccweb_index.server.service import Service

from conftest import Corpus, cli, session, stdio_client_for, wait_until

SOURCE = "orch"
INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"


def ids(svc: Service, **arguments: Any) -> list[str]:
    result = svc.call(CONVERSATIONS, arguments, SOURCE)
    assert not result.is_error, result.payload
    return [row["conversationId"] for row in result.payload["conversations"]]


def inputs(svc: Service, conversation_id: str) -> list[str] | str:
    result = svc.call(INPUTS, {"conversationId": conversation_id}, None)
    if result.is_error:
        return result.payload["error"]["code"]
    return [item["content"] for item in result.payload["inputs"]]


def child(*texts: str, updated: str) -> dict[str, Any]:
    return session(*texts, updated=updated, created_from={"kind": "mcp", "sourceSessionId": SOURCE})


@pytest.fixture
def watched(corpus: Corpus, db_path: Path) -> Iterator[Service]:
    corpus.write("first", child("one", updated="2026-11-20T00:00:00Z"))
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    assert isinstance(svc.watcher, InotifyWatcher)
    yield svc
    svc.close()


def synced_on(svc: Service, directory: Path) -> bool:
    watcher = svc.watcher
    return isinstance(watcher, InotifyWatcher) and watcher.running and watcher.watched == dir_identity(str(directory))


def assert_synced_without_sweeps(svc: Service, corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-place edit of a session outside the answer reorders scope "all": only a synced watcher
    can know that without comparing every file."""
    corpus.write("probe-a", session("a", updated="2026-11-01T00:00:00Z"))
    corpus.write("probe-b", session("b", updated="2026-11-02T00:00:00Z"))
    assert ids(svc, limit=1)[0] not in ("probe-a",)

    def no_sweeps(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a synced watcher must make full reconciles unnecessary")

    monkeypatch.setattr(svc.indexer, "reconcile", no_sweeps)
    corpus.write("probe-a", session("a", updated="2099-01-01T00:00:00Z"), how="inplace")
    assert ids(svc, limit=1) == ["probe-a"]
    monkeypatch.undo()


def test_missing_at_start_through_the_server(tmp_path: Path) -> None:
    """The server starts, answers conversation_not_found and empty lists, then sees the directory."""
    sessions = tmp_path / "sessions"
    db = tmp_path / "index.sqlite"
    log = tmp_path / "server.log"
    with open(log, "w") as errlog, stdio_client_for(sessions, db, source=SOURCE, errlog=errlog) as client:
        for _ in range(3):
            payload, is_error = client.call(INPUTS, {})
            assert is_error and payload["error"]["code"] == "conversation_not_found"
            for arguments in ({}, {"scope": "children"}):
                payload, is_error = client.call(CONVERSATIONS, arguments)
                assert not is_error and payload["conversations"] == [] and payload["hasMore"] is False
        corpus = Corpus(sessions)  # it appears
        corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
        corpus.write("kid", child("part", updated="2026-11-21T00:00:00Z"))
        payload, is_error = client.call(INPUTS, {})
        assert not is_error and [i["content"] for i in payload["inputs"]] == ["plan"]
        payload, _ = client.call(CONVERSATIONS, {"scope": "children"})
        assert [row["conversationId"] for row in payload["conversations"]] == ["kid"]
        payload, _ = client.call(CONVERSATIONS, {})
        assert [row["conversationId"] for row in payload["conversations"]] == ["kid", SOURCE]
    text = log.read_text()
    assert text.count("does not exist") == 1, text
    assert "Traceback" not in text


def test_build_of_a_missing_directory_fails_clearly(tmp_path: Path) -> None:
    for command in ("build", "watch"):
        result = cli(command, "--sessions-dir", str(tmp_path / "nope"), "--db", str(tmp_path / "db.sqlite"))
        assert result.returncode != 0 and "does not exist" in result.stderr and "Traceback" not in result.stderr


def test_missing_at_start_then_watched_once_it_appears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = tmp_path / "sessions"
    svc = Service(sessions, tmp_path / "index.sqlite", watch=True)
    svc.start()
    try:
        assert svc.watcher is None
        assert ids(svc) == [] and inputs(svc, "x") == "conversation_not_found"
        corpus = Corpus(sessions)
        corpus.write("x", session("hello", updated="2026-11-20T00:00:00Z"))
        assert ids(svc) == ["x"] and inputs(svc, "x") == ["hello"]  # right away, watcher or not
        assert wait_until(lambda: synced_on(svc, sessions), timeout=10)
        assert_synced_without_sweeps(svc, corpus, monkeypatch)
    finally:
        svc.close()


def test_deleted_and_recreated_while_watched(watched: Service, corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ids(watched, scope="children") == ["first"]
    shutil.rmtree(corpus.path)
    assert ids(watched) == [] and ids(watched, scope="children") == []
    assert inputs(watched, "first") == "conversation_not_found"
    corpus.path.mkdir()
    corpus.write("second", child("two", updated="2026-11-21T00:00:00Z"))
    assert ids(watched, scope="children") == ["second"]
    assert inputs(watched, "second") == ["two"] and inputs(watched, "first") == "conversation_not_found"
    assert wait_until(lambda: synced_on(watched, corpus.path), timeout=10)
    assert_synced_without_sweeps(watched, corpus, monkeypatch)


def test_renamed_while_watched(watched: Service, corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = tmp_path / "moved-away"
    corpus.path.rename(moved)
    assert ids(watched) == [] and inputs(watched, "first") == "conversation_not_found"
    (moved / "ghost.json").write_text("{}")  # changes in the renamed directory are not this path's
    assert ids(watched) == []
    corpus.path.mkdir()
    corpus.write("third", child("three", updated="2026-11-22T00:00:00Z"))
    assert ids(watched) == ["third"]
    assert wait_until(lambda: synced_on(watched, corpus.path), timeout=10)
    assert_synced_without_sweeps(watched, corpus, monkeypatch)


def test_replaced_by_a_symlink_while_watched(watched: Service, corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = Corpus(tmp_path / "elsewhere")
    elsewhere.write("there", child("over there", updated="2026-11-23T00:00:00Z"))
    corpus.path.rename(tmp_path / "old")
    corpus.path.symlink_to(elsewhere.path)
    assert ids(watched, scope="children") == ["there"] and inputs(watched, "there") == ["over there"]
    assert inputs(watched, "first") == "conversation_not_found"
    assert wait_until(lambda: synced_on(watched, elsewhere.path), timeout=10)
    assert_synced_without_sweeps(watched, elsewhere, monkeypatch)
    # The symlink re-pointed (no event reaches the old watch): noticed before the next answer.
    again = Corpus(tmp_path / "again")
    again.write("later", session("later", updated="2026-11-24T00:00:00Z"))
    tmp_link = tmp_path / "link.tmp"
    tmp_link.symlink_to(again.path)
    os.replace(tmp_link, corpus.path)
    assert ids(watched) == ["later"]
    assert wait_until(lambda: synced_on(watched, again.path), timeout=10)


@pytest.mark.parametrize(
    "failure",
    ["instance-limit", "watch-limit"],
)
def test_inotify_unavailable_falls_back_to_polling(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    from watchdog.observers import inotify_c

    if failure == "instance-limit":
        def refuse(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EMFILE, "inotify instance limit reached")
        monkeypatch.setattr(inotify_c.InotifyFD, "__init__", refuse)
    else:
        def refuse_watch(self: Any, path: bytes, mask: Any) -> None:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")
        monkeypatch.setattr(inotify_c.InotifyFD, "_get_or_create_watch", refuse_watch)
    corpus.write("a", session("x", updated="2026-11-20T00:00:00Z"))
    caplog.set_level(logging.INFO, logger="ccweb_index")
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        assert isinstance(svc.watcher, PollingWatcher) and svc.watcher.running
        corpus.write("b", session("y", updated="2026-11-21T00:00:00Z"))
        corpus.write("a", session("x", updated="2026-11-22T00:00:00Z"), how="inplace")
        assert ids(svc) == ["a", "b"]  # polling cannot prove it is current: the files are checked
        time.sleep(1.2)  # several supervisor rounds: it does not retry inotify while nothing changed
        assert isinstance(svc.watcher, PollingWatcher)
    finally:
        svc.close()
    lines = [r.getMessage() for r in caplog.records if "inotify is unavailable" in r.getMessage()]
    assert len(lines) == 1 and "polling the sessions directory instead" in lines[0], lines
    assert ("limit reached") in lines[0]


def test_an_event_queue_overflow_means_a_full_reconcile(
    corpus: Corpus, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real overflow: the watcher's reader is held up while more events than the kernel queue holds
    happen; a session created meanwhile has its event lost, and is found by the reconcile."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    corpus.write("a", session("x", updated="2026-11-20T00:00:00Z"))
    corpus.write("b", session("y", updated="2026-11-21T00:00:00Z"))
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    svc = Service(corpus.path, db_path, watch=True)
    svc.start()
    try:
        watcher = svc.watcher
        assert isinstance(watcher, InotifyWatcher)
        # Held before its next read (it takes this lock on leaving its wait), whichever way the
        # installed watchdog hands events on: the kernel queue then fills.
        reader = watcher._inotify._parked_lock
        reader.acquire()
        try:
            os.utime(corpus.file("a"))
            paths = [corpus.file("a"), corpus.file("b")]
            for n in range(limit + 2000):  # alternate, so the kernel cannot merge them
                os.utime(paths[n % 2])
            corpus.write("late", session("z", updated="2026-11-29T00:00:00Z"), how="atomic")  # lost
            reconciles = []
            real = svc.indexer.reconcile
            svc.indexer.reconcile = lambda *a, **k: reconciles.append(1) or real(*a, **k)  # type: ignore[method-assign]
        finally:
            reader.release()
        assert ids(svc) == ["late", "b", "a"]
        assert reconciles, "the overflow did not lead to a full reconcile"
        assert watcher.running
    finally:
        svc.close()
    # Once: watchdog tells each of the watcher's two callbacks, and both said it.
    said = [r.getMessage() for r in caplog.records]
    assert sum("the watcher lost events (inotify queue overflow)" in m for m in said) == 1, said


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_a_sessions_directory_that_cannot_be_read(tmp_path: Path, watch: bool) -> None:
    from faults import permissions_apply, unprivileged_prefix

    reason = permissions_apply(tmp_path)
    if reason:
        pytest.skip(reason)
    corpus = Corpus(tmp_path / "sessions")
    corpus.write(SOURCE, session("plan", updated="2026-11-20T00:00:00Z"))
    log = tmp_path / "server.log"
    args = () if watch else ("--no-watch",)
    with open(log, "w") as errlog, stdio_client_for(corpus.path, tmp_path / "db.sqlite", source=SOURCE, args=args,
                                                    errlog=errlog, prefix=unprivileged_prefix()) as client:  # fmt: skip
        assert not client.call(INPUTS, {})[1]
        corpus.path.chmod(0)
        try:
            for _ in range(3):
                for name, arguments in ((INPUTS, {}), (CONVERSATIONS, {}), (CONVERSATIONS, {"scope": "children"})):
                    payload, is_error = client.call(name, arguments)
                    assert is_error and payload["error"]["code"] == "sessions_directory_unreadable", payload
        finally:
            corpus.path.chmod(0o755)
        time.sleep(1.1)  # past the back-off
        payload, is_error = client.call(INPUTS, {})
        assert not is_error and [i["content"] for i in payload["inputs"]] == ["plan"]
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.count("cannot be read (Permission denied)") == 1, text
