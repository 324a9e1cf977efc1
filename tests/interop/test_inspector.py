"""The MCP Inspector CLI (pinned in package.json) against `ccweb-index serve`, over stdio and HTTP.

The Inspector has its own result check: a tool error that carried `structuredContent` failed it
(exit 1) instead of reaching the user. Each run is one session: `initialize`, the method, exit.
Exit status 0 is an answer, 5 a tool error shown as such (its result on stdout), 3 refused auth.

Every case runs against one HTTP server for the module (a run over stdio starts a server of its own, a
second of CPU each); stdio is covered by the schema check, a success and a tool error that each take
their source from the environment, and the cursor test, whose every page is a new server process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drive import HERE, INSTALL_HINT, node
from test_clients import CONVERSATIONS, INPUTS, ORACLES, SOURCE, WAIT, write_corpus
from test_http import SOURCE_HEADER, TOKEN, HttpServer, http_server

import reference
from conftest import CCWEB_INDEX, Corpus, client_launch
from test_contract import without_cursor

INSPECTOR = HERE / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
# A run that hangs is a failure, not a stuck test run.
RUN_SECONDS = 90
# The Inspector's own connect timeout (default 15 s) covers a stdio server's start; on a loaded machine
# that start took longer. Within RUN_SECONDS, so a hang still fails the run.
CONNECT_TIMEOUT_MS = 60_000
TOOL_IS_ERROR, AUTH_REQUIRED = 5, 3
# (tool, --tool-arg pairs, arguments as the server receives them); the Inspector reads values as JSON.
CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    (INPUTS, ["limit=1", "maxChars=5"], {"limit": 1, "maxChars": 5}),
    (INPUTS, ["conversationId=ghost"], {"conversationId": "ghost"}),
    (INPUTS, ["conversationId=not-an-id!"], {"conversationId": "not-an-id!"}),
    (INPUTS, ["conversationId=broken"], {"conversationId": "broken"}),
    (CONVERSATIONS, ["scope=children"], {"scope": "children"}),
    (WAIT, ["scope=children", "timeoutSeconds=0"], {"scope": "children", "timeoutSeconds": 0}),
    (WAIT, ["since=\"not a token!\""], {"since": "not a token!"}),
    (CONVERSATIONS, ["scope=descendants", 'conversationIds=["g1", "c2", "ghost"]'], {"scope": "descendants", "conversationIds": ["g1", "c2", "ghost"]}),
    (CONVERSATIONS, ["cursor=garbage"], {"cursor": "garbage"}),
]


def inspector(*args: str, target: list[str]) -> subprocess.CompletedProcess[str]:
    if not INSPECTOR.exists():
        raise AssertionError(f"the MCP Inspector is not installed in tests/interop: {INSTALL_HINT}")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    environment["MCP_INSPECTOR_SECRET_STORE"] = "memory"  # no keychain on a CI machine
    command = [node(), str(INSPECTOR), "--cli", "--stored-auth-only", "--connect-timeout", str(CONNECT_TIMEOUT_MS), *args,
               "--", *target]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_SECONDS, env=environment, stdin=subprocess.DEVNULL)


def check_call(run: subprocess.CompletedProcess[str], corpus: Corpus, tool: str, arguments: dict[str, Any], source: str | None) -> None:
    want, want_error = ORACLES[tool](str(corpus.path), arguments, source)
    assert run.returncode == (TOOL_IS_ERROR if want_error else 0), (tool, arguments, run.stdout[-2000:], run.stderr[-2000:])
    result = json.loads(run.stdout)
    payload = json.loads(result["content"][0]["text"])
    if want_error:
        assert result["isError"] is True and "structuredContent" not in result
        assert payload["error"]["code"] == want["error"]["code"]
    else:  # a cursor is opaque: the reference makes its own
        assert result["structuredContent"] == payload
        assert without_cursor(payload) == without_cursor(want)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    corpus = Corpus(tmp_path_factory.mktemp("inspector") / "sessions")
    write_corpus(corpus)
    return corpus


@pytest.fixture(scope="module")
def server(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("inspector-http")
    with http_server(corpus.path, root / "index.sqlite", root / "server.log", token=TOKEN) as server:
        yield server


def stdio_target(corpus: Corpus, tmp_path: Path) -> list[str]:
    return client_launch("serve", "--sessions-dir", str(corpus.path), "--db", str(tmp_path / "index.sqlite"))


def test_strict_schema_check(corpus: Corpus, server: HttpServer, tmp_path: Path) -> None:
    # The installed command itself, exec'd by the Inspector with the few variables it passes (no LANG,
    # no PYTHON*): the real start under a client's minimal environment.
    assert CCWEB_INDEX is not None
    exec_target = [CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path), "--db", str(tmp_path / "index.sqlite")]
    for target, headers in ((exec_target, []), ([server.url], ["--header", f"Authorization: Bearer {TOKEN}"])):
        run = inspector("--method", "tools/list", "--strict", *headers, target=target)
        # Its findings read `Warning: tool "..."` / `Error: tool "..."` (the server's own log shares stderr).
        assert run.returncode == 0 and not re.search(r"(Warning|Error): tool", run.stderr), run.stderr
        assert {tool["name"] for tool in json.loads(run.stdout)["tools"]} == {INPUTS, CONVERSATIONS, WAIT}


# Over stdio: a success that needs the source and a tool error (exit 5), the source from the environment.
STDIO_CASES = [case for case in CASES if case[1] in (["scope=children"], ["conversationId=broken"])]


@pytest.mark.parametrize(("tool", "pairs", "arguments"), CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES])
def test_calls_over_http(corpus: Corpus, server: HttpServer, tool: str, pairs: list[str], arguments: dict[str, Any]) -> None:
    run = inspector("--method", "tools/call", "--tool-name", tool, "--tool-arg", *pairs,
                    "--header", f"Authorization: Bearer {TOKEN}", f"{SOURCE_HEADER}: {SOURCE}", target=[server.url])  # fmt: skip
    check_call(run, corpus, tool, arguments, SOURCE)


def test_calls_over_http_without_a_source(corpus: Corpus, server: HttpServer) -> None:
    """No source header: scope "children" has nobody's children to list."""
    run = inspector("--method", "tools/call", "--tool-name", CONVERSATIONS, "--tool-arg", "scope=children",
                    "--header", f"Authorization: Bearer {TOKEN}", target=[server.url])  # fmt: skip
    check_call(run, corpus, CONVERSATIONS, {"scope": "children"}, None)


def test_calls_over_stdio(corpus: Corpus, tmp_path: Path) -> None:
    assert len(STDIO_CASES) == 2
    for tool, pairs, arguments in STDIO_CASES:
        run = inspector("-e", f"CCWEB_SOURCE_SESSION_ID={SOURCE}", "--method", "tools/call", "--tool-name", tool,
                        "--tool-arg", *pairs, target=stdio_target(corpus, tmp_path))  # fmt: skip
        check_call(run, corpus, tool, arguments, SOURCE)


def test_a_cursor_from_one_run_continues_in_the_next(corpus: Corpus, tmp_path: Path) -> None:
    """Each Inspector run is a session of its own: the cursor carries everything the next page needs."""
    target = stdio_target(corpus, tmp_path)
    ours: dict[str, Any] = {"scope": "descendants", "limit": 1}
    theirs = dict(ours)
    for _ in range(10):
        pairs = [f"{key}={json.dumps(value)}" for key, value in ours.items()]
        run = inspector("-e", f"CCWEB_SOURCE_SESSION_ID={SOURCE}", "--method", "tools/call", "--tool-name", CONVERSATIONS,
                        "--tool-arg", *pairs, target=target)  # fmt: skip
        want = reference.list_conversations(str(corpus.path), theirs, SOURCE)[0]
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        payload = json.loads(run.stdout)["structuredContent"]
        assert without_cursor(payload) == without_cursor(want)
        if payload["nextCursor"] is None:
            return
        ours["cursor"], theirs["cursor"] = payload["nextCursor"], want["nextCursor"]
    raise AssertionError("the pages never ended")


def test_a_missing_token_is_named(server: HttpServer) -> None:
    for headers in ([], ["--header", "Authorization: Bearer not-the-token"]):
        run = inspector("--method", "tools/list", *headers, target=[server.url])
        print(f"Inspector, {headers or 'no token'}: exit {run.returncode}: {run.stdout.strip()} {run.stderr.strip()}")
        assert run.returncode == AUTH_REQUIRED, (run.stdout, run.stderr)
        shown = run.stdout + run.stderr
        assert "CCWEB_INDEX_TOKEN" in shown and "--token-file" in shown, shown
