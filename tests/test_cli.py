"""The `ccweb-index` commands build, call and status, and their errors (in-process: see conftest.cli)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from ccweb_index.indexer import files

from conftest import CCWEB_INDEX, Corpus, cli, client_launch, session, stdio_client_for


def test_build_is_incremental_and_prints_a_summary(corpus: Corpus, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short racy window, waited out, so that unchanged files are settled and must not be read again.
    monkeypatch.setattr(files, "RACY_WINDOW_NS", 50_000_000)
    corpus.write("a", session("x", "y"))
    corpus.write("b", session("z"))
    corpus.write("broken", b"{")
    time.sleep(2 * files.RACY_WINDOW_NS / 1e9)
    first = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert first.returncode == 0, first.stderr
    assert "2 sessions, 3 user inputs, 1 unreadable; read 3 files, removed 0" in first.stderr
    corpus.write("b", session("z", "w"))
    corpus.delete("a")
    again = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert again.returncode == 0, again.stderr
    assert "1 sessions, 2 user inputs, 1 unreadable; read 1 files, removed 1" in again.stderr


@pytest.mark.parametrize("command", [("build",), ("call", "ccweb_list_conversations")], ids=" ".join)
def test_a_missing_directory_fails_clearly(tmp_path: Path, db_path: Path, command: tuple[str, ...]) -> None:
    """`call` answered an empty list for a mistyped directory, and made an index for it (found by an
    independent test, as a new user)."""
    result = cli(*command, "--sessions-dir", str(tmp_path / "nope"), "--db", str(db_path))
    assert result.returncode == 1, result.stderr
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db_path.exists()


def test_status_of_an_index_it_cannot_look_at_says_so(tmp_path: Path, corpus: Corpus) -> None:
    """A path `stat` fails on (a directory on the way this user cannot search; here, as root can
    search any, a name too long) ended `status` in a traceback (found by an independent test, as a
    new user)."""
    db = tmp_path / ("x" * 300 + ".sqlite")
    result = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"cannot look at the index {db}: File name too long" in result.stderr, result.stderr


def test_call_prints_the_tool_json_and_exits_1_on_a_tool_error(corpus: Corpus, db_path: Path) -> None:
    corpus.write("orch", session("build it"))
    corpus.write("kid", session("do a part", created_from={"kind": "mcp", "sourceSessionId": "orch"}))
    env = {"CCWEB_SESSIONS_DIR": str(corpus.path), "CCWEB_INDEX_DB": str(db_path)}
    ok = cli("call", "ccweb_list_conversations", '{"scope": "children"}', "--source-session", "orch", env=env)
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    assert [r["conversationId"] for r in payload["conversations"]] == ["kid"]

    env["CCWEB_SOURCE_SESSION_ID"] = "kid"
    inputs = cli("call", "ccweb_list_user_inputs", env=env)
    assert json.loads(inputs.stdout)["inputs"][0]["content"] == "do a part"

    missing = cli("call", "ccweb_list_user_inputs", '{"conversationId": "ghost"}', env=env)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "conversation_not_found"


def test_call_rejects_bad_argument_json(corpus: Corpus, db_path: Path) -> None:
    # A lone surrogate: every transport refuses the request (docs/decisions.md); so does `call`.
    for bad in ("{not json", "[1, 2]", '{"agent": "\\ud800"}'):
        result = cli("call", "ccweb_list_conversations", bad, "--sessions-dir", str(corpus.path), "--db", str(db_path))
        assert result.returncode == 2
        assert "ARGS_JSON" in result.stderr and "Traceback" not in result.stderr


def test_status_lists_unreadable_files_with_reasons(corpus: Corpus, db_path: Path) -> None:
    corpus.write("good", session("x"))
    corpus.write("torn", b'{"messages": [')
    corpus.write("arr", b"[]")
    cli("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    result = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    assert "sessions: 1 readable, 2 unreadable now" in result.stdout
    assert "unreadable torn.json: invalid JSON" in result.stdout
    assert "unreadable arr.json: top level is not a JSON object" in result.stdout
    assert str(db_path) in result.stdout and "last reconcile: " in result.stdout


def test_the_parse_budget_option_reaches_every_command(corpus: Corpus, db_path: Path) -> None:
    """--parse-bytes-in-flight / CCWEB_PARSE_BYTES_IN_FLIGHT: `serve` over stdio opens its service in
    another thread than the command's, which has no click context of its own."""
    corpus.write("a", session("hello"))
    called = cli("call", "--sessions-dir", str(corpus.path), "--db", str(db_path), "--parse-bytes-in-flight", "4096",
                 "ccweb_list_user_inputs", '{"conversationId": "a"}')  # fmt: skip
    assert called.returncode == 0, called.stderr
    for args, env in ((("--parse-bytes-in-flight", "4096"), None), ((), {"CCWEB_PARSE_BYTES_IN_FLIGHT": "4096"})):
        with stdio_client_for(corpus.path, db_path, args=args, env=env) as client:
            payload, is_error = client.call("ccweb_list_user_inputs", {"conversationId": "a"})
        assert not is_error and [i["content"] for i in payload["inputs"]] == ["hello"]


def test_status_makes_no_index(corpus: Corpus, db_path: Path, tmp_path: Path) -> None:
    """A look with a mistyped sessions directory made an index that belonged to it, and every later
    command with the right one was refused (found by an independent test)."""
    corpus.write("a", session("x"))
    result = cli("status", "--sessions-dir", str(tmp_path / "typo"), "--db", str(db_path))
    assert result.returncode == 0 and "none yet" in result.stdout and "(missing)" in result.stdout, result.stdout
    assert not db_path.exists()
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(db_path)).returncode == 0
    assert "sessions: 1 readable" in cli("status", "--sessions-dir", str(corpus.path), "--db", str(db_path)).stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_stdout_that_cannot_be_written_ends_the_command_with_one_line(corpus: Corpus, db_path: Path) -> None:
    """A full disk under `status > file` or `call ... > file` ended in a traceback (found by an
    independent test), and so did `--help` and `--version`, which click writes itself. Run as
    processes: the failure is the real stdout's."""
    corpus.write("a", session("x"))
    common = ("--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert cli("build", *common).returncode == 0
    for args in (
        ("status", *common),
        ("call", "ccweb_list_conversations", '{"scope": "all"}', *common),
        ("--help",),
        ("--version",),
        ("build", "--help"),
    ):
        with open("/dev/full", "w") as full:
            result = subprocess.run(client_launch(*args), stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        assert result.returncode == 1, result.stderr
        assert "cannot write to standard output: No space left on device" in result.stderr
        assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr


def test_call_writes_utf8_whatever_the_locale(corpus: Corpus, db_path: Path) -> None:
    """JSON's encoding is UTF-8, and users' words fit no narrower charset: under a latin-1 locale
    `call` died on the first CJK character (found by an independent test). Exec'd rather than
    forked, so that the interpreter starts under that locale."""
    assert CCWEB_INDEX is not None
    corpus.write("a", session("修复登录 — ship it 🚀"))
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "LC_ALL": "C", "LANG": "C"}
    common = ("--sessions-dir", str(corpus.path), "--db", str(db_path))
    args = (CCWEB_INDEX, "call", "ccweb_list_user_inputs", '{"conversationId": "a"}', *common)
    result = subprocess.run(args, capture_output=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.decode("utf-8"))["inputs"][0]["content"] == "修复登录 — ship it 🚀"


@pytest.mark.parametrize("source", ["<conversationId>", "orchestrator"])
def test_a_stdio_server_told_a_source_that_is_no_id_says_so_at_start(corpus: Corpus, db_path: Path, source: str) -> None:
    """The README's placeholder left in: the server started without a word, and each call needing
    the source answered missing_source_conversation (found by an independent test, as a new user)."""
    result = subprocess.run([CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path), "--db", str(db_path)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "CCWEB_SOURCE_SESSION_ID": source})  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    said = f"the source conversation {source!r} (CCWEB_SOURCE_SESSION_ID or --source-session) is not a conversation id"
    assert (said in result.stderr) == (source == "<conversationId>"), result.stderr


def test_an_index_path_under_a_file_says_it_is_not_a_directory(tmp_path: Path, corpus: Corpus) -> None:
    """A file where the index's directory goes was warned about as a directory open to others
    (mode 0644) before the command failed (found by a review)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    afile.chmod(0o644)
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(afile / "x.sqlite"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"cannot create {afile}: Not a directory" in result.stderr and "open to other users" not in result.stderr, result.stderr
