"""Hostile entries in the sessions directory (issue #5, "Bad files").

Each must neither crash, hang nor slow the server (files over the limit are never read, FIFOs and
devices never opened, symlinks never followed: inotify shows what was opened and read), be logged
once per file state, be listed by `ccweb-index status` with its reason, and be answered as the
contract says: not a session -> conversation_not_found; unreadable -> conversation_unreadable, or its
last good version.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from ccweb_index.indexer import files, load
from ccweb_index.server.service import Service

import reference
from conftest import Corpus, cli, session, stdio_client_for
from faults import OpenWatch, can_mknod_device, permissions_apply, unprivileged_prefix
from test_contract import same_answer

MAX_BYTES = 100_000
SOURCE = "ok"
INPUTS = "ccweb_list_user_inputs"
CONVERSATIONS = "ccweb_list_conversations"

# Not valid sessions: unreadable (-> conversation_unreadable, left out of lists).
UNREADABLE: dict[str, bytes] = {
    "truncated": b'{"title": "t", "messages": [{"role": "user", "content": "hal',
    "empty": b"",
    "invalid-utf8": b'{"title": "caf\xe9", "messages": []}',
    "bom": b"\xef\xbb\xbf" + json.dumps(session("has a bom")).encode(),
    "surrogate": b'{"title": "lone \\ud800 surrogate", "messages": []}',
    "nan": b'{"updatedAt": NaN, "messages": []}',
    "infinity": b'{"updatedAt": -Infinity, "messages": []}',
    "top-array": b'[{"title": "x", "messages": []}]',
    "top-string": b'"{\\"title\\": \\"a string\\"}"',
    "deep": b'{"x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
}
# The reasons `status` gives, as patterns.
REASONS = {
    "truncated": "invalid JSON", "empty": "empty file", "invalid-utf8": "invalid UTF-8",
    "bom": "byte-order mark", "surrogate": "invalid JSON", "nan": "invalid JSON", "infinity": "invalid JSON",
    "top-array": "top level is not a JSON object", "top-string": "top level is not a JSON object",
    "deep": "nested too deeply", "big": f"over the {MAX_BYTES}-byte limit",
    "huge": f"file is {2**31} bytes, over the {MAX_BYTES}-byte limit",
}  # fmt: skip
# Named like sessions, but not regular files (-> conversation_not_found, never opened).
NOT_SESSIONS = {
    "fifo": "a FIFO", "link": "a symlink", "dangling": "a symlink", "zero": "a symlink",
    "link-to-fifo": "a symlink", "dir": "a directory",
}  # fmt: skip


def dup_keys() -> bytes:
    # Duplicate keys are valid JSON; the last one wins (docs/decisions.md).
    first = json.dumps([{"role": "user", "content": "one"}])
    last = json.dumps([{"role": "user", "content": "two"}])
    return (
        '{"title": "first", "agent": "claude", "title": "second", "updatedAt": "2026-11-21T00:00:00Z", '
        f'"messages": {first}, "messages": {last}}}'
    ).encode()


def build_corpus(root: Path) -> tuple[Corpus, Path, Path]:
    """The hostile corpus, a directory outside it, and a mirror of its readable sessions (for the oracle)."""
    corpus = Corpus(root / "sessions")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(session("a secret", updated="2026-11-25T00:00:00Z")))
    corpus.write("ok", session("hello", "world", updated="2026-11-20T00:00:00Z"))
    corpus.write("dup", dup_keys())
    corpus.write("kid", session("child input", updated="2026-11-22T00:00:00Z",
                                created_from={"kind": "mcp", "sourceSessionId": SOURCE}))  # fmt: skip
    for name, data in UNREADABLE.items():
        corpus.write(name, data)
    corpus.write("big", session("x" * (MAX_BYTES + 10), updated="2026-11-23T00:00:00Z"))  # valid, too large
    with open(corpus.file("huge"), "wb") as f:
        f.truncate(2**31)  # 2 GiB, sparse: costs nothing unless read
    os.mkfifo(corpus.file("fifo"))
    corpus.file("link").symlink_to(outside / "secret.json")
    corpus.file("dangling").symlink_to(root / "nowhere.json")
    corpus.file("zero").symlink_to("/dev/zero")  # followed and read, this would never end
    corpus.file("link-to-fifo").symlink_to(corpus.file("fifo"))
    corpus.file("dir").mkdir()
    (corpus.file("dir") / "inner.json").write_text(json.dumps(session("inside a directory")))
    mirror = root / "mirror"
    mirror.mkdir()
    for name in ("ok", "dup", "kid"):
        shutil.copy2(corpus.file(name), mirror / f"{name}.json")
    return corpus, outside, mirror


def expected_inputs(mirror: Path, conversation_id: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    if conversation_id in UNREADABLE or conversation_id in ("big", "huge"):
        return {"error": {"code": "conversation_unreadable", "message": "x" * 30}}, True
    if conversation_id in NOT_SESSIONS:
        return {"error": {"code": "conversation_not_found", "message": "x" * 30}}, True
    return reference.list_user_inputs(mirror, {**arguments, "conversationId": conversation_id}, SOURCE)


def log_lines(log: Path, pattern: str) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if re.search(pattern, line))


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_hostile_entries_through_the_server(tmp_path: Path, watch: bool) -> None:
    corpus, outside, mirror = build_corpus(tmp_path)
    db = tmp_path / "index" / "index.sqlite"
    log = tmp_path / "server.log"
    args = ("--max-session-bytes", str(MAX_BYTES), *(() if watch else ("--no-watch",)))
    ids = ["ok", "dup", "kid", *UNREADABLE, "big", "huge", *NOT_SESSIONS]
    with OpenWatch(corpus.path, outside) as opens, open(log, "w") as errlog:
        with stdio_client_for(corpus.path, db, source=SOURCE, args=args, errlog=errlog) as client:
            for _ in range(3):  # every answer, three times: logged once all the same
                for conversation_id in ids:
                    arguments = {"conversationId": conversation_id, "limit": 5}
                    same_answer(client.call(INPUTS, arguments), expected_inputs(mirror, conversation_id, arguments))
                for arguments in ({}, {"scope": "children"}, {"agent": "CLAUDE", "limit": 2}, {"status": "idle"}):
                    same_answer(client.call(CONVERSATIONS, arguments), reference.list_conversations(mirror, arguments, SOURCE))
            # A new state of a bad file within UNREADABLE_LOG_SECONDS is counted, not logged again
            # (tests/test_log_rate.py); unchanged ones stay quiet.
            corpus.write("truncated", b'{"title": "still half')
            same_answer(client.call(INPUTS, {"conversationId": "truncated"}), expected_inputs(mirror, "truncated", {}))
            same_answer(client.call(CONVERSATIONS, {}), reference.list_conversations(mirror, {}, SOURCE))
        status = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db), "--max-session-bytes", str(MAX_BYTES))

        # Never opened (FIFO, what symlinks point to), never read (over the limit).
        for name in ("fifo.json", "link-to-fifo.json", "big.json", "huge.json", "secret.json", "dir.json"):
            assert opens.touched(name) == [], f"{name} was opened or read: {opens.touched(name)}"
        assert "ok.json" in opens.files_touched(), "control: the watch sees the server's reads"

    assert status.returncode == 0, status.stderr
    for name, reason in REASONS.items():
        assert re.search(rf"unreadable {re.escape(name)}\.json: .*{re.escape(reason)}", status.stdout), (name, status.stdout)
    for name, kind in NOT_SESSIONS.items():
        assert re.search(rf"ignored {re.escape(name)}\.json: {kind}", status.stdout), (name, status.stdout)
    assert not re.search(r"(unreadable|ignored) (ok|dup|kid)\.json", status.stdout)

    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    for name in [*UNREADABLE, "big", "huge"]:
        assert log_lines(log, rf"session {re.escape(name)} is unreadable") == 1, (name, text[-3000:])
    for name, kind in NOT_SESSIONS.items():
        assert log_lines(log, rf"ignoring .*/{re.escape(name)}\.json: it is {kind}") == 1, (name, text[-3000:])


def test_a_fifo_is_never_read(tmp_path: Path) -> None:
    """Strace-free proof that a FIFO named like a session is never read: bytes waiting in it stay there."""
    corpus = Corpus(tmp_path / "sessions")
    corpus.write("ok", session("hello"))
    os.mkfifo(corpus.file("pipe"))
    keeper = os.open(corpus.file("pipe"), os.O_RDWR | os.O_NONBLOCK)  # never blocks, keeps the pipe alive
    try:
        os.write(keeper, b'{"title": "read me"}')
        with stdio_client_for(corpus.path, tmp_path / "db.sqlite", source="pipe") as client:
            for arguments in ({}, {"conversationId": "pipe"}):
                payload, is_error = client.call(INPUTS, arguments)
                assert is_error and payload["error"]["code"] == "conversation_not_found"
            payload, _ = client.call(CONVERSATIONS, {})
            assert [row["conversationId"] for row in payload["conversations"]] == ["ok"]
        assert os.read(keeper, 100) == b'{"title": "read me"}', "someone read from the FIFO"
    finally:
        os.close(keeper)


def test_a_device_named_like_a_session_is_never_opened(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    reason = can_mknod_device(corpus.path)
    if reason:
        pytest.skip(reason)
    corpus.write("ok", session("hello"))
    os.mknod(corpus.file("dev"), stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null: reads as an empty file
    db = tmp_path / "db.sqlite"
    with OpenWatch(corpus.path) as opens:
        with stdio_client_for(corpus.path, db, args=("--no-watch",)) as client:
            payload, is_error = client.call(INPUTS, {"conversationId": "dev"})
            assert is_error and payload["error"]["code"] == "conversation_not_found"
            payload, _ = client.call(CONVERSATIONS, {})
            assert [row["conversationId"] for row in payload["conversations"]] == ["ok"]
        status = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db))
        assert opens.touched("dev.json") == []
    assert "ignored dev.json: a device (never opened), not a session" in status.stdout


def test_a_file_without_read_permission(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    reason = permissions_apply(tmp_path)
    if reason:
        pytest.skip(reason)
    corpus.write("ok", session("hello", updated="2026-11-20T00:00:00Z"))
    corpus.write("noperm", session("secret", updated="2026-11-21T00:00:00Z"))
    corpus.write("wasgood", session("readable once", updated="2026-11-22T00:00:00Z"))
    corpus.file("noperm").chmod(0)
    db = tmp_path / "db.sqlite"
    log = tmp_path / "server.log"
    prefix = unprivileged_prefix()  # as root: without the capability to read regardless of permissions
    with open(log, "w") as errlog, stdio_client_for(corpus.path, db, prefix=prefix, errlog=errlog) as client:
        for _ in range(2):
            payload, is_error = client.call(INPUTS, {"conversationId": "noperm"})
            assert is_error and payload["error"]["code"] == "conversation_unreadable", payload
            assert "Permission denied" in payload["error"]["message"]
        before, _ = client.call(INPUTS, {"conversationId": "wasgood"})
        corpus.file("wasgood").chmod(0)  # readable before: its last good version stands in
        for _ in range(2):
            assert client.call(INPUTS, {"conversationId": "wasgood"}) == (before, False)
            payload, _ = client.call(CONVERSATIONS, {})
            assert [row["conversationId"] for row in payload["conversations"]] == ["wasgood", "ok"]
    status = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert "unreadable noperm.json: cannot read: Permission denied\n" in status.stdout, status.stdout
    assert "unreadable wasgood.json: cannot read: Permission denied (answering from its last good version)" in status.stdout
    assert log_lines(log, "session noperm is unreadable: cannot read: Permission denied") == 1
    assert log_lines(log, "session wasgood is unreadable: cannot read: Permission denied") == 1
    assert "Traceback" not in log.read_text()


def test_a_file_that_grows_past_the_limit_keeps_its_last_good_version(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    corpus.write("s", session("small", updated="2026-11-20T00:00:00Z"))
    with OpenWatch(corpus.path) as opens:
        svc = Service(corpus.path, tmp_path / "db.sqlite", max_session_bytes=10_000)
        svc.start()
        try:
            before = svc.call(INPUTS, {"conversationId": "s"}, None)
            assert not before.is_error
            opens.poll()
            opens.events.clear()
            corpus.write("s", session("x" * 20_000, updated="2026-11-21T00:00:00Z"))
            opens.poll()
            opens.events.clear()
            assert svc.call(INPUTS, {"conversationId": "s"}, None) == before
            assert svc.call(CONVERSATIONS, {}, None).payload["conversations"][0]["updatedAt"] == "2026-11-20T00:00:00.000Z"
            assert opens.touched("s.json") == [], "a file over the limit was opened"
            size = corpus.file("s").stat().st_size
            assert svc.unreadable() == [("s", f"file is {size} bytes, over the 10000-byte limit (--max-session-bytes)", True)]
        finally:
            svc.close()


def test_a_file_growing_past_the_limit_while_read_is_cut_off() -> None:
    """Checked before reading, and counted while reading: a file that grows during the read is not
    read beyond the limit (memory stays bounded). A pipe stands in for a file that keeps growing."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b" " * 5000)
        with pytest.raises(files.TooLarge):
            files._read_all(read_end, 2, 1000)
        os.close(write_end)
        write_end = -1
        left = b""
        while chunk := os.read(read_end, 10_000):
            left += chunk
        assert len(left) >= 5000 - 1001, "read past the limit"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


# --- replaced or deleted between the listing and the read ----------------------------------------------

SWAPS = ["deleted", "fifo", "symlink", "directory", "new-content", "unreadable"]


def swap(corpus: Corpus, how: str, outside: Path) -> None:
    path = corpus.file("victim")
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "symlink":
        path.symlink_to(outside)
    elif how == "directory":
        path.mkdir()
    elif how == "new-content":
        path.write_text(json.dumps(session("after", updated="2026-11-29T00:00:00Z")))
    elif how == "unreadable":
        path.write_bytes(b'{"messages": [')


def expected_after(how: str, corpus: Corpus, last_good: dict[str, Any], arguments: dict[str, Any],
                   tool: str) -> tuple[dict[str, Any], bool]:  # fmt: skip
    oracle = reference.list_user_inputs if tool == INPUTS else reference.list_conversations
    return oracle(corpus.path, arguments, None, last_good if how == "unreadable" else None)


@pytest.mark.parametrize("how", SWAPS)
@pytest.mark.parametrize("where", ["before-open", "after-check"])
def test_a_file_swapped_between_listing_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, where: str) -> None:
    """The swap happens after the listing and the lstat, right before the read (`before-open`), or
    after the O_PATH check, right before the open for reading (`after-check`). Either way the answer is
    the one for what is there after the swap."""
    corpus = Corpus(tmp_path / "sessions")
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps(session("not yours")))
    corpus.write("other", session("other", updated="2026-11-01T00:00:00Z"))
    corpus.write("victim", session("before", updated="2026-11-20T00:00:00Z"))
    svc = Service(corpus.path, tmp_path / "db.sqlite")
    svc.start()
    try:
        corpus.write("victim", session("before", "more", updated="2026-11-21T00:00:00Z"))  # must be read again
        svc.call(INPUTS, {"conversationId": "victim"}, None)
        indexed = {"victim": (corpus.file("victim").read_bytes(), corpus.file("victim").stat().st_mtime_ns // 1_000_000)}
        corpus.write("victim", session("before", "more", "again", updated="2026-11-22T00:00:00Z"))
        last_good = indexed
        pending = [how]

        def swap_once() -> None:
            if pending:
                swap(corpus, pending.pop(), outside)

        if where == "before-open":
            real = load.read_session_file

            def swapping_read(path: str, max_bytes: int) -> Any:
                if path.endswith("victim.json"):
                    swap_once()
                return real(path, max_bytes)

            monkeypatch.setattr(load, "read_session_file", swapping_read)
        else:
            real_open = files._open_for_reading

            def swapping_open(path: str, flags: int = files._READ_FLAGS) -> int:
                swap_once()  # the O_PATH descriptor pins the inode that was checked
                return real_open(path, flags)

            monkeypatch.setattr(files, "_open_for_reading", swapping_open)

        with OpenWatch(corpus.path, tmp_path) as opens:
            first = svc.call(INPUTS, {"conversationId": "victim"}, None)
            assert not pending, "the swap did not happen"
            monkeypatch.undo()
            assert opens.touched("secret.json") == [], "a symlink was followed"
            if where == "before-open" and how in ("deleted", "fifo", "symlink", "directory"):
                assert "open" not in opens.touched("victim.json")
        # after-check: the inode checked is the inode read, and the swap changed its ctime (unlink), so
        # the read is seen to be torn and done again, on what is there now.
        same_answer((first.payload, first.is_error), expected_after(how, corpus, last_good, {"conversationId": "victim"}, INPUTS))
        for tool, arguments in ((INPUTS, {"conversationId": "victim"}), (CONVERSATIONS, {})):
            result = svc.call(tool, arguments, None)
            same_answer((result.payload, result.is_error), expected_after(how, corpus, last_good, arguments, tool))
    finally:
        svc.close()


class _MountPoint:
    """A directory entry as readdir reports a mount point: the inode of the directory it covers,
    not that of the mounted root, which lstat gives."""

    def __init__(self, entry: os.DirEntry[str]) -> None:
        self._entry = entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)

    def inode(self) -> int:
        return self._entry.inode() + 1


def test_an_ignored_mount_point_is_logged_once_whichever_look_sees_it(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The listing (readdir's types), the sweep and the one-file look note an entry by the same
    inode, so an entry that is not a regular file is logged once, however they take turns."""
    corpus.write("ok", session("hello"))
    os.mkdir(corpus.file("mounted"))
    real_scandir = os.scandir

    @contextlib.contextmanager
    def scandir(path: Any) -> Any:
        with real_scandir(path) as entries:
            yield [_MountPoint(entry) if entry.name == "mounted.json" else entry for entry in entries]

    monkeypatch.setattr(files.os, "scandir", scandir)
    with caplog.at_level("WARNING", logger="ccweb_index"):
        for _ in range(2):
            assert files.list_sessions(str(corpus.path)).keys() == {"ok"}
            assert [swept[0] for swept in files.sweep_sessions(str(corpus.path))] == ["ok"]
            assert files.lstat_session(str(corpus.path), "mounted") is None
    logged = [record.getMessage() for record in caplog.records if "mounted.json" in record.getMessage()]
    assert len(logged) == 1, logged
