"""`scope: "children"` without a caught-up watcher (issue 10, item 2).

A session becomes a child not only when its file is created: Node's `fs.writeFile` creates (or
truncates) the file first and writes it afterwards, and cc-web may rewrite a session in place to add
`createdFrom`. Neither changes the directory, so a check that trusted the directory's signature
missed both for good. Every mode without a caught-up watcher is run: no watcher, polling, inotify
unavailable (so polling), and an inotify watcher whose cookie cannot be written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.server.service import Service

from conftest import Corpus, session, stdio_client_for

SOURCE = "orch"


def child(*inputs: str, status: str = "idle") -> dict[str, Any]:
    return session(*inputs, status=status, updated="2026-11-29T08:00:00Z",
                   created_from={"kind": "mcp", "sourceSessionId": SOURCE})  # fmt: skip


def node_write_file(path: Path, doc: dict[str, Any], between: Any) -> None:
    """`fs.writeFile`: open with O_TRUNC (creating the file), then write; `between` runs in between."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        between()
        os.write(fd, json.dumps(doc).encode())
    finally:
        os.close(fd)


MODES = ["no-watch", "poll", "no-inotify", "cookie-fails"]


@pytest.fixture(params=MODES)
def service(request: pytest.FixtureRequest, corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    mode = request.param
    corpus.write("seed", session("hello", updated="2026-11-01T00:00:00Z"))
    if mode == "no-inotify":  # fs.inotify.max_user_instances reached
        from watchdog.observers import inotify_c

        def no_instance(self: Any) -> None:
            raise OSError(errno.EMFILE, "inotify instance limit reached")

        monkeypatch.setattr(inotify_c.InotifyFD, "__init__", no_instance)
    svc = Service(corpus.path, db_path, watch=mode != "no-watch", poll=mode == "poll")
    svc.start()
    if mode == "cookie-fails":
        from ccweb_index.indexer.watch import InotifyWatcher

        assert isinstance(svc.watcher, InotifyWatcher)
        shutil.rmtree(svc.watcher._cookie_dir)  # the cookie cannot be written: not synced
        assert not svc.watcher.sync()
    yield svc
    svc.close()


def children(svc: Service) -> list[tuple[str, str]]:
    result = svc.call("ccweb_list_conversations", {"scope": "children"}, SOURCE)
    assert not result.is_error, result.payload
    return [(row["conversationId"], row["status"]) for row in result.payload["conversations"]]


def test_node_write_file_with_a_call_between_open_and_write(service: Service, corpus: Corpus) -> None:
    seen_between: list[Any] = []
    node_write_file(corpus.file("w1"), child("build the api"), lambda: seen_between.append(children(service)))
    assert seen_between == [[]]  # an empty file: not a child yet
    assert children(service) == [("w1", "idle")]


def test_node_write_file_rewriting_a_known_child(service: Service, corpus: Corpus) -> None:
    corpus.write("w1", child("one"))
    assert children(service) == [("w1", "idle")]
    node_write_file(corpus.file("w1"), child("one", "two", status="done"), lambda: children(service))
    assert children(service) == [("w1", "done")]


def test_in_place_rewrite_that_adds_created_from(service: Service, corpus: Corpus) -> None:
    path = corpus.write("w2", session("plain", updated="2026-11-29T08:00:00Z"))
    inode = path.stat().st_ino
    assert children(service) == []
    corpus.write("w2", child("plain"), how="inplace")
    assert path.stat().st_ino == inode
    assert children(service) == [("w2", "idle")]


def test_in_place_rewrite_that_removes_created_from(service: Service, corpus: Corpus) -> None:
    corpus.write("w3", child("x"))
    assert children(service) == [("w3", "idle")]
    corpus.write("w3", session("x", updated="2026-11-29T08:00:00Z"), how="inplace")
    assert children(service) == []


@pytest.mark.parametrize("args", [("--no-watch",), ("--poll",)], ids=["no-watch", "poll"])
def test_through_the_stdio_server(corpus: Corpus, db_path: Path, args: tuple[str, ...]) -> None:
    corpus.write("seed", session("hello", updated="2026-11-01T00:00:00Z"))
    corpus.write("w2", session("plain", updated="2026-11-29T08:00:00Z"))
    with stdio_client_for(corpus.path, db_path, source=SOURCE, args=args) as client:

        def kids() -> list[str]:
            payload, is_error = client.call("ccweb_list_conversations", {"scope": "children"})
            assert not is_error, payload
            return [row["conversationId"] for row in payload["conversations"]]

        seen_between: list[list[str]] = []
        node_write_file(corpus.file("w1"), child("one"), lambda: seen_between.append(kids()))
        assert seen_between == [[]]
        assert kids() == ["w1"]
        corpus.write("w2", child("plain"), how="inplace")
        assert kids() == ["w1", "w2"]
