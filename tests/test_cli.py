"""The installed `ccweb-index` command: build, call, status, and their errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import CCWEB_INDEX, Corpus, session, stdio_client_for


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    environment.update(env or {})
    return subprocess.run([CCWEB_INDEX, *args], capture_output=True, text=True, env=environment, timeout=60)


def test_build_is_incremental_and_prints_a_summary(corpus: Corpus, db_path: Path) -> None:
    corpus.write("a", session("x", "y"))
    corpus.write("b", session("z"))
    corpus.write("broken", b"{")
    first = run("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert first.returncode == 0, first.stderr
    assert "2 sessions, 3 user inputs, 1 unreadable; read 3 files" in first.stderr
    corpus.write("b", session("z", "w"))
    again = run("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    # a and broken are unchanged but freshly written (racy), so may be re-read; b must be
    assert "2 sessions, 4 user inputs, 1 unreadable" in again.stderr


def test_build_of_a_missing_directory_fails_clearly(tmp_path: Path, db_path: Path) -> None:
    result = run("build", "--sessions-dir", str(tmp_path / "nope"), "--db", str(db_path))
    assert result.returncode != 0
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_call_prints_the_tool_json_and_exits_1_on_a_tool_error(corpus: Corpus, db_path: Path) -> None:
    corpus.write("orch", session("build it"))
    corpus.write("kid", session("do a part", created_from={"kind": "mcp", "sourceSessionId": "orch"}))
    env = {"CCWEB_SESSIONS_DIR": str(corpus.path), "CCWEB_INDEX_DB": str(db_path)}
    ok = run("call", "ccweb_list_conversations", '{"scope": "children"}', "--source-session", "orch", env=env)
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    assert [r["conversationId"] for r in payload["conversations"]] == ["kid"]

    env["CCWEB_SOURCE_SESSION_ID"] = "kid"
    inputs = run("call", "ccweb_list_user_inputs", env=env)
    assert json.loads(inputs.stdout)["inputs"][0]["content"] == "do a part"

    missing = run("call", "ccweb_list_user_inputs", '{"conversationId": "ghost"}', env=env)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "conversation_not_found"


def test_call_rejects_bad_argument_json(corpus: Corpus, db_path: Path) -> None:
    for bad in ("{not json", "[1, 2]"):
        result = run("call", "ccweb_list_conversations", bad, "--sessions-dir", str(corpus.path), "--db", str(db_path))
        assert result.returncode == 2
        assert "ARGS_JSON" in result.stderr and "Traceback" not in result.stderr


def test_status_lists_unreadable_files_with_reasons(corpus: Corpus, db_path: Path) -> None:
    corpus.write("good", session("x"))
    corpus.write("torn", b'{"messages": [')
    corpus.write("arr", b"[]")
    run("build", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    result = run("status", "--sessions-dir", str(corpus.path), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    assert "sessions: 1 readable, 2 unreadable now" in result.stdout
    assert "unreadable torn.json: invalid JSON" in result.stdout
    assert "unreadable arr.json: top level is not a JSON object" in result.stdout
    assert str(db_path) in result.stdout and "last reconcile: " in result.stdout


def test_the_parse_budget_option_reaches_every_command(corpus: Corpus, db_path: Path) -> None:
    """--parse-bytes-in-flight / CCWEB_PARSE_BYTES_IN_FLIGHT: `serve` over stdio opens its service in
    another thread than the command's, which has no click context of its own."""
    corpus.write("a", session("hello"))
    called = run("call", "--sessions-dir", str(corpus.path), "--db", str(db_path), "--parse-bytes-in-flight", "4096",
                 "ccweb_list_user_inputs", '{"conversationId": "a"}')  # fmt: skip
    assert called.returncode == 0, called.stderr
    for args, env in ((("--parse-bytes-in-flight", "4096"), None), ((), {"CCWEB_PARSE_BYTES_IN_FLIGHT": "4096"})):
        with stdio_client_for(corpus.path, db_path, args=args, env=env) as client:
            payload, is_error = client.call("ccweb_list_user_inputs", {"conversationId": "a"})
        assert not is_error and [i["content"] for i in payload["inputs"]] == ["hello"]
