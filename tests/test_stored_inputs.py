"""The index keeps only the head of each input and its length (issue 12), and answers the same.

An index written by the version before (full text, no length column) is converted in place by the
migration `m004_input_heads`; it must answer exactly as a fresh build does, and both as the
reference oracle reading the files. The inputs sit on every edge: lengths N-1, N, N+1, far beyond
N, CJK, astral code points (one code point, two UTF-16 units, four bytes), a NUL (where SQLite's own
string functions stop counting).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database

from ccweb_index.indexer.db import connect, get_meta, open_index
from ccweb_index.indexer.sessionfile import parse_session
from ccweb_index.indexer.stored import STORED_CHARS_KEY, STORED_INPUT_CHARS
from ccweb_index.migrations import migrations
from ccweb_index.server.service import Service
from ccweb_index.server.tools import USER_INPUTS_TOOL

import reference
from conftest import Corpus, session
from faults import indexed
from test_contract import without_cursor

N = STORED_INPUT_CHARS
EMOJI = "\U0001f600"  # outside the BMP
LOG_LINE = "2026-11-29T08:00:00Z ERROR worker[17]: Traceback (most recent call last): KeyError('x')\n"

SESSIONS = {
    "edges": ["a" * (N - 1), "b" * N, "c" * (N + 1), "short"],
    "cjk": ["汉字" * (N // 2 + 1), "中" * (N - 1), "文" * N, "。"],
    "astral": [EMOJI * (N + 1), EMOJI * N, EMOJI * (N - 1), "x" * (N - 1) + EMOJI + "tail"],
    "long": [LOG_LINE * 1_800, "def f():\n    return 1\n" * 400, "ok"],
    "nul": ["x\x00y" * (N // 2), "\x00" * (N + 3), "z"],
    "mixed": ["🧑‍💻 调试 " * 300 + "end", "plain", "é" * (N + 1)],
}
ARGUMENTS = [{}] + [
    {"limit": limit, "maxChars": max_chars}
    for limit in (1, 2, 3, 50)
    for max_chars in (1, 2, 7, N // 2, N - 1, N)
]
ROWS = "SELECT session_id, seq, message_id, created_at_ms, content, original_chars FROM user_inputs ORDER BY 1, 2"


@pytest.fixture
def edge_corpus(corpus: Corpus) -> Corpus:
    for n, (session_id, inputs) in enumerate(SESSIONS.items()):
        corpus.write(session_id, session(*inputs, updated=f"2026-11-29T08:0{n}:00Z"))
    return corpus


def build(corpus: Corpus, db_path: Path) -> None:
    svc = Service(corpus.path, db_path)
    svc.start()
    svc.close()


def build_old_schema(corpus: Corpus, db_path: Path, fresh: Path) -> None:
    """An index as the version before wrote it: schema up to m003, each input's full text.

    The sessions table did not change, so its rows are those of a fresh build; the user inputs are
    what that version stored: the parsed content, whole.
    """
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(db_path)
    migrations.apply(Database(conn), stop_before="m004_input_heads")
    conn.execute("ATTACH DATABASE ? AS fresh", (str(fresh),))
    conn.execute("INSERT INTO sessions SELECT * FROM fresh.sessions")
    conn.execute("INSERT INTO meta SELECT * FROM fresh.meta WHERE key != ?", (STORED_CHARS_KEY,))
    conn.execute("DETACH DATABASE fresh")
    for session_id in SESSIONS:
        parsed = parse_session(corpus.file(session_id).read_bytes())
        conn.executemany(
            "INSERT INTO user_inputs (session_id, seq, message_id, created_at_ms, content) VALUES (?, ?, ?, ?, ?)",
            [(session_id, seq, i.message_id, i.created_at_ms, i.content) for seq, i in enumerate(parsed.user_inputs)],
        )
    conn.close()


def trust_rows(db_path: Path) -> None:
    # The files have not changed since the build, but were written too recently to be trusted
    # (racy). Trusting them makes every answer below come from the stored rows, not from a re-read.
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE sessions SET racy = 0")
    conn.commit()
    conn.close()


def answers(corpus: Corpus, db_path: Path) -> list[dict]:
    trust_rows(db_path)
    svc = Service(corpus.path, db_path)
    try:
        out = []
        for session_id in SESSIONS:
            for arguments in ARGUMENTS:
                result = svc.call("ccweb_list_user_inputs", {"conversationId": session_id, **arguments}, None)
                assert not result.is_error, result.payload
                out.append(result.payload)
        return out
    finally:
        svc.close()


def expected(corpus: Corpus) -> list[dict]:
    out = []
    for session_id in SESSIONS:
        for arguments in ARGUMENTS:
            payload, is_error = reference.list_user_inputs(str(corpus.path), {"conversationId": session_id, **arguments}, None)
            assert not is_error
            out.append(payload)
    return out


def opaque(payloads: list[dict]) -> list[dict]:
    """A cursor is opaque: only whether there is one is compared."""
    return [without_cursor(payload) for payload in payloads]


def rows(db_path: Path) -> list[tuple]:
    return indexed(db_path, ROWS)


def test_the_index_keeps_the_head_and_the_length_in_code_points(edge_corpus: Corpus, db_path: Path) -> None:
    build(edge_corpus, db_path)
    stored = {(r[0], r[1]): (r[4], r[5]) for r in rows(db_path)}
    for session_id, inputs in SESSIONS.items():
        for seq, text in enumerate(inputs):
            assert stored[(session_id, seq)] == (text[:N], len(text)), (session_id, seq)
    assert max(len(content) for content, _ in stored.values()) == N


def test_the_largest_budget_is_what_the_index_keeps() -> None:
    assert USER_INPUTS_TOOL["inputSchema"]["properties"]["maxChars"]["maximum"] == N


def test_an_old_index_migrated_in_place_answers_as_a_fresh_build(edge_corpus: Corpus, tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh" / "index.sqlite", tmp_path / "old" / "index.sqlite"
    build(edge_corpus, fresh)
    build_old_schema(edge_corpus, old, fresh)
    assert max(len(r[4]) for r in sqlite3.connect(old).execute("SELECT 0,0,0,0,content FROM user_inputs")) > N

    conn = open_index(old, os.path.realpath(edge_corpus.path))  # applies m004_input_heads
    assert get_meta(conn, STORED_CHARS_KEY) == N
    conn.close()
    assert rows(old) == rows(fresh)
    oracle = opaque(expected(edge_corpus))
    assert opaque(answers(edge_corpus, fresh)) == oracle
    assert opaque(answers(edge_corpus, old)) == oracle


def test_an_index_that_keeps_less_than_an_answer_can_show_is_rebuilt(edge_corpus: Corpus, db_path: Path) -> None:
    build(edge_corpus, db_path)
    # As written by a version whose largest budget was smaller.
    short = 10
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE user_inputs SET content = substr(content, 1, ?)", (short,))
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (short, STORED_CHARS_KEY))
    conn.commit()
    conn.close()

    assert opaque(answers(edge_corpus, db_path)) == opaque(expected(edge_corpus))
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT value FROM meta WHERE key = ?", (STORED_CHARS_KEY,)).fetchone() == (N,)
    assert conn.execute("SELECT COUNT(*) FROM user_inputs WHERE length(content) = ?", (short,)).fetchone()[0] == 0
    conn.close()


def test_an_index_that_keeps_more_is_used_and_then_says_it_keeps_less(edge_corpus: Corpus, db_path: Path) -> None:
    build(edge_corpus, db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (N + 500, STORED_CHARS_KEY))
    conn.execute("INSERT INTO sessions (id, ino, size, mtime_ns, ctime_ns, racy, good) VALUES ('kept', 1, 1, 1, 1, 0, 1)")
    conn.commit()
    conn.close()

    conn = open_index(db_path, os.path.realpath(edge_corpus.path))
    assert conn.execute("SELECT id FROM sessions WHERE id = 'kept'").fetchone() == ("kept",), "not rebuilt"
    # New rows keep only N code points now: a later, larger constant must rebuild this index.
    assert get_meta(conn, STORED_CHARS_KEY) == N
    conn.close()
