"""Paths are bytes (issue 10, item 7): a sessions directory whose name is not UTF-8 (`\\xff\\xfe sess`)
works with every command. It used to crash each with UnicodeEncodeError (SQLite refused the path
as text; a strict UTF-8 stdout refused to print it). The index records the path's bytes
(os.fsencode), and its default location is keyed by them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ccweb_index.server.cli import main
from ccweb_index.server.service import Service

from conftest import CCWEB_INDEX, Corpus, session, stdio_client_for, wait_until
from faults import clean_env

SOURCE = "orch"
NAME = os.fsdecode(b"\xff\xfe sess")


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Corpus:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default index goes here
    corpus = Corpus(tmp_path / NAME)
    corpus.write("w1", session("hello", updated="2026-11-29T08:00:00Z",
                               created_from={"kind": "mcp", "sourceSessionId": SOURCE}))  # fmt: skip
    corpus.write("plain", session("other", updated="2026-11-01T00:00:00Z"))
    corpus.write("bad", b"{")
    return corpus


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize("db", ["default", "explicit"])
def test_build_status_and_call(corpus: Corpus, tmp_path: Path, db: str) -> None:
    where = ["--sessions-dir", str(corpus.path)]
    if db == "explicit":
        where += ["--db", str(tmp_path / os.fsdecode(b"idx\xfe") / "index.sqlite")]
    code, out = run("build", *where)
    assert code == 0, out
    assert "2 sessions, 2 user inputs, 1 unreadable" in out
    result = CliRunner().invoke(main, ["status", *where], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert os.fsencode(f"sessions directory: {corpus.path}\n") in result.stdout_bytes  # its own bytes
    assert "unreadable bad.json" in result.output
    code, out = run("call", "ccweb_list_conversations", '{"scope": "children"}', "--source-session", SOURCE, *where)
    assert code == 0, out
    assert [row["conversationId"] for row in json.loads(out)["conversations"]] == ["w1"]
    code, out = run("call", "ccweb_list_user_inputs", '{"conversationId": "w1"}', *where)
    assert code == 0 and json.loads(out)["inputs"][0]["content"] == "hello", out


def test_the_index_records_the_paths_bytes(corpus: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    Service(corpus.path, db).close()
    import sqlite3

    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'sessions_dir'").fetchone() == (os.fsencode(corpus.path),)
    conn.close()
    other = Corpus(tmp_path / os.fsdecode(b"\xff\xfd sess"))
    code, out = run("build", "--sessions-dir", str(other.path), "--db", str(db))
    assert code == 1 and "belongs to the sessions directory" in out, out


def test_status_on_a_strict_utf8_stdout(corpus: Corpus) -> None:
    """What a UTF-8 locale gives: a stdout that refuses surrogate escapes."""
    result = subprocess.run(
        [CCWEB_INDEX, "status", "--sessions-dir", os.fsencode(corpus.path)],
        capture_output=True, env=clean_env(PYTHONIOENCODING="utf-8:strict"), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert b"sessions directory: " + os.fsencode(corpus.path) in result.stdout
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "no-watcher"])
def test_the_service_stays_fresh(corpus: Corpus, tmp_path: Path, watch: bool) -> None:
    svc = Service(corpus.path, tmp_path / "index.sqlite", watch=watch)
    svc.start()
    try:
        corpus.write("w2", session("new", updated="2026-11-30T08:00:00Z",
                                   created_from={"kind": "mcp", "sourceSessionId": SOURCE}))  # fmt: skip
        result = svc.call("ccweb_list_conversations", {"scope": "children"}, SOURCE)
        assert [row["conversationId"] for row in result.payload["conversations"]] == ["w2", "w1"]
    finally:
        svc.close()


@pytest.mark.parametrize("args", [(), ("--no-watch",)], ids=["watcher", "no-watcher"])
def test_serve_over_stdio(corpus: Corpus, tmp_path: Path, args: tuple[str, ...]) -> None:
    log = tmp_path / "server.log"
    with open(log, "w") as errlog, stdio_client_for(corpus.path, tmp_path / "i.sqlite", source=SOURCE, args=args,
                                                    errlog=errlog) as client:  # fmt: skip
        payload, is_error = client.call("ccweb_list_conversations", {"scope": "children"})
        assert not is_error and [row["conversationId"] for row in payload["conversations"]] == ["w1"], payload
        payload, is_error = client.call("ccweb_list_user_inputs", {"conversationId": "bad"})
        assert is_error
    assert "Traceback" not in log.read_text(errors="replace")


def test_watch(corpus: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "i.sqlite"
    proc = subprocess.Popen(
        [CCWEB_INDEX, "watch", "--sessions-dir", os.fsencode(corpus.path), "--db", db],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=clean_env(PYTHONIOENCODING="utf-8:strict"),
    )  # fmt: skip
    try:
        svc = Service(corpus.path, db)
        try:
            assert wait_until(lambda: svc.counts()["sessions"] == 2, 15)
            corpus.write("w3", session("x"))
            assert wait_until(lambda: svc.counts()["sessions"] == 3, 15)
        finally:
            svc.close()
    finally:
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err, err
