"""A read that fails for the environment's reasons (out of descriptors, memory, an I/O error) is not
the file's state (issue 10, item 1): it is never recorded against the file's signature, so the file
stays due. The next look reads it again, and the watcher retries it with back-off, so once the
shortage is over every answer shows the file as it is, without anyone writing it again.

The shortage is injected in-process (session files' opens fail with EMFILE while it lasts), and
through `prlimit` on a running stdio server.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer import files
from ccweb_index.server.service import Service

from conftest import Corpus, index_held_elsewhere, server_pid, session, stdio_client_for, wait_until

SOURCE = "orch"


def worker(status: str, *inputs: str) -> dict[str, Any]:
    return session(*inputs or ("build the ui",), status=status, updated="2026-11-29T08:00:00Z",
                   created_from={"kind": "mcp", "sourceSessionId": SOURCE})  # fmt: skip


class Shortage:
    """While on, opening anything in the sessions directory (or through /proc/self/fd, how a checked
    file is reopened) fails with EMFILE, as it does when the process is out of descriptors."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sessions_dir: Path) -> None:
        self.on = False
        self.failed = 0
        real_open = os.open
        where = (str(os.path.realpath(sessions_dir)) + os.sep, "/proc/self/fd/")

        def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if self.on and isinstance(path, str) and path.startswith(where):
                self.failed += 1
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(files.os, "open", open_)

    @contextmanager
    def during(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False


def children(svc: Service) -> list[tuple[str, str]]:
    result = svc.call("ccweb_list_conversations", {"scope": "children"}, SOURCE)
    assert not result.is_error, result.payload
    return [(row["conversationId"], row["status"]) for row in result.payload["conversations"]]


def all_rows(svc: Service) -> list[tuple[str, str]]:
    result = svc.call("ccweb_list_conversations", {}, SOURCE)
    assert not result.is_error, result.payload
    return [(row["conversationId"], row["status"]) for row in result.payload["conversations"]]


def indexed_status(db: Path, session_id: str) -> str | None:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT status FROM sessions WHERE id = ? AND good = 1 AND error IS NULL", (session_id,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


@pytest.fixture
def settled_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    # The report came 45 s after the shortage, long after every signature had settled; a
    # short racy window gets the test there without waiting (a racy row would be re-read anyway).
    monkeypatch.setattr(files, "RACY_WINDOW_NS", 50_000_000)


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_a_shortage_during_a_write_is_not_recorded(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, settled_quickly: None, watch: bool
) -> None:
    corpus.write("worker-ui", worker("waiting"))
    corpus.write("other", session("unrelated", updated="2026-11-01T00:00:00Z"))
    shortage = Shortage(monkeypatch, corpus.path)
    svc = Service(corpus.path, db_path, watch=watch)
    svc.start()
    try:
        assert children(svc) == [("worker-ui", "waiting")]
        with shortage.during():
            corpus.write("worker-ui", worker("done", "build the ui", "ship it"))
            corpus.write("worker-api", worker("running", "build the api"))  # created during the shortage
            time.sleep(0.3)  # the watcher's applier meets the shortage too
            # Meanwhile the last good version answers; the new worker cannot be read yet.
            assert children(svc) == [("worker-ui", "waiting")]
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "worker-api"}, None)
            assert result.is_error and result.payload["error"]["code"] == "conversation_unreadable", result.payload
            said_to_caller = result.payload["error"]["message"]
            # The server's shortage, with its limit: not advice to wait for cc-web's write.
            assert "out of file descriptors (the open-files limit is " in said_to_caller, said_to_caller
            assert "cc-web has finished writing" not in said_to_caller, said_to_caller
        assert shortage.failed > 0, "control: the shortage was met"
        time.sleep(0.1)  # every signature seen is settled now
        if watch:
            # Nobody calls: the watcher retries by itself until it reads them.
            assert wait_until(lambda: indexed_status(db_path, "worker-ui") == "done", 10)
            assert wait_until(lambda: indexed_status(db_path, "worker-api") == "running", 10)
        assert children(svc) == [("worker-api", "running"), ("worker-ui", "done")]
        assert ("worker-ui", "done") in all_rows(svc)
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "worker-ui"}, None)
        assert [item["content"] for item in result.payload["inputs"]] == ["build the ui", "ship it"]
    finally:
        svc.close()


def test_a_shortage_met_while_answering_from_the_files_is_the_servers(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same word when the index is held elsewhere and the call reads the file itself: the
    shortage and its limit, not "wait for cc-web"."""
    from ccweb_index.server import from_index

    monkeypatch.setattr(from_index, "LOCK_WAIT_SECONDS", 0.2)
    corpus.write("worker-ui", worker("waiting"))
    shortage = Shortage(monkeypatch, corpus.path)
    svc = Service(corpus.path, db_path, watch=False)
    svc.start()
    from_the_files: list[Any] = []
    answer_from_files = svc._from_files.inputs
    monkeypatch.setattr(svc._from_files, "inputs", lambda *a: from_the_files.append(a) or answer_from_files(*a))
    try:
        corpus.write("worker-api", worker("running", "build the api"))
        with index_held_elsewhere(svc), shortage.during():
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "worker-api"}, None)
    finally:
        svc.close()
    assert shortage.failed > 0 and from_the_files, "control: the shortage was met, by the files' answer"
    assert result.is_error and result.payload["error"]["code"] == "conversation_unreadable", result.payload
    message = result.payload["error"]["message"]
    assert "out of file descriptors (the open-files limit is " in message, message
    assert "cc-web has finished writing" not in message, message


def test_a_shortage_is_not_stored_even_when_no_call_comes_in_between(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, settled_quickly: None
) -> None:
    """The issue's second observation: a worker created during the shortage was missing from
    `children` until someone asked for its inputs. Here only `children` is ever called."""
    corpus.write("other", session("unrelated", updated="2026-11-01T00:00:00Z"))
    shortage = Shortage(monkeypatch, corpus.path)
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        with shortage.during():
            corpus.write("worker-api", worker("running"))
            assert children(svc) == []
        time.sleep(0.1)
        assert children(svc) == [("worker-api", "running")]
    finally:
        svc.close()


def test_a_shortage_is_logged_once_not_as_an_unreadable_file(
    corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "ccweb_index")
    corpus.write("worker-ui", worker("waiting"))
    shortage = Shortage(monkeypatch, corpus.path)
    svc = Service(corpus.path, db_path)
    svc.start()
    try:
        with shortage.during():
            for n in range(5):
                corpus.write("worker-ui", worker("done", *(["x"] * (n + 1))))
                children(svc)
        children(svc)
    finally:
        svc.close()
    text = caplog.text
    assert "is unreadable" not in text, text
    assert (
        text.count("cannot be read now (cannot read it now: out of file descriptors (the open-files limit is ") == 1
    ), text
    assert text.count("session files can be read again") == 1, text
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT COUNT(*) FROM sessions WHERE error IS NOT NULL").fetchone() == (0,)
    conn.close()


# --- the same through a real stdio server and the kernel's own descriptor limit ------------------


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def set_nofile(pid: int, limit: int) -> None:
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:"], check=True)  # the soft limit


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_prlimit_during_a_write_through_the_stdio_server(tmp_path: Path, watch: bool) -> None:
    corpus = Corpus(tmp_path / "sessions")
    db = tmp_path / "index" / "index.sqlite"
    corpus.write("worker-ui", worker("waiting"))
    args = () if watch else ("--no-watch",)
    with stdio_client_for(corpus.path, db, source=SOURCE, args=args) as client:

        def kids() -> list[tuple[str, str]]:
            payload, is_error = client.call("ccweb_list_conversations", {"scope": "children"})
            assert not is_error, payload
            return [(row["conversationId"], row["status"]) for row in payload["conversations"]]

        assert kids() == [("worker-ui", "waiting")]
        pid = server_pid(db)
        limit = open_descriptors(pid)
        set_nofile(pid, limit)  # not one more descriptor
        try:
            corpus.write("worker-ui", worker("done"))
            corpus.write("worker-api", worker("running"))
            time.sleep(0.5)
            client.call("ccweb_list_conversations", {"scope": "children"})  # an error or old answers
            # The new worker cannot be opened: the caller is told the server's limit, over the wire.
            payload, is_error = client.call("ccweb_list_user_inputs", {"conversationId": "worker-api"})
            assert is_error and payload["error"]["code"] == "conversation_unreadable", payload
            assert f"out of file descriptors (the open-files limit is {limit})" in payload["error"]["message"], payload
        finally:
            set_nofile(pid, 4096)
        # Past the racy window and the back-off the failures started, so the index must answer.
        time.sleep(files.RACY_WINDOW_NS / 1e9 + 1.5)
        assert kids() == [("worker-api", "running"), ("worker-ui", "done")]
