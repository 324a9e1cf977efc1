"""`serve` answers `initialize` and `tools/list` before its index is open; the first call waits for it.

An MCP client such as Codex starts its first turn about a second after it spawns the server, whether
the server has answered or not (issue 8). The order is what is tested here, not a time (the times are
in bench/initialize.py and docs/benchmarks.md): the index's opening is held back until the test lets
it go, and the server must answer the handshake meanwhile and the call only after.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from ccweb_index.server.tools import TOOLS

import reference
from conftest import CCWEB_INDEX, Corpus, session

SOURCE = "orch"
# A server that hangs fails the test after this long, instead of the run.
ANSWER_SECONDS = 30.0
# How long a held-back call is watched for an answer that must not come yet.
HELD_SECONDS = 1.0

# `ccweb-index serve`, with the opening of the index held until a file exists.
GATED_SERVE = """
import os, sys, time
from ccweb_index.server import service
opened = service.Service.__init__
def held(self, *args, **kwargs):
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    opened(self, *args, **kwargs)
service.Service.__init__ = held
from ccweb_index.server.cli import main
main(sys.argv[2:], prog_name="ccweb-index")
"""
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}  # fmt: skip


class Pipe:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        while b"\n" not in self._buffer:
            if not select.select([self.proc.stdout.fileno()], [], [], timeout)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}, **extra}


def test_the_handshake_does_not_wait_for_the_index(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "sessions")
    corpus.write(SOURCE, session("plan the release", "now ship it"))
    gate = tmp_path / "open-the-index"
    command = [sys.executable, "-c", GATED_SERVE, str(gate), "serve", "--sessions-dir", str(corpus.path), "--db", str(tmp_path / "db.sqlite")]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env(CCWEB_SOURCE_SESSION_ID=SOURCE))
    pipe = Pipe(proc)
    try:
        pipe.send(INITIALIZE)
        answer = pipe.receive(ANSWER_SECONDS)
        assert answer is not None and answer["result"]["serverInfo"]["name"] == "ccweb-index", answer
        pipe.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        pipe.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        answer = pipe.receive(ANSWER_SECONDS)
        assert answer is not None and len(answer["result"]["tools"]) == len(TOOLS), answer
        pipe.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ccweb_list_user_inputs", "arguments": {}}})
        assert pipe.receive(HELD_SECONDS) is None, "a call was answered before the index was opened"
        pipe.send({"jsonrpc": "2.0", "id": 4, "method": "ping"})  # the server is not blocked meanwhile
        answer = pipe.receive(ANSWER_SECONDS)
        assert answer is not None and answer["id"] == 4 and answer["result"] == {}, answer
        gate.touch()
        answer = pipe.receive(ANSWER_SECONDS)
        assert answer is not None and answer["id"] == 3, answer
        want, _ = reference.list_user_inputs(str(corpus.path), {}, SOURCE)
        assert answer["result"]["structuredContent"] == want
    finally:
        gate.touch()
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(ANSWER_SECONDS) == 0


def test_an_index_that_cannot_be_used_stops_the_server_with_the_reason(tmp_path: Path) -> None:
    """A configuration error found while opening the index ends the server, as it did before it
    opened the index in the background: status 1, and the reason on stderr."""
    db = tmp_path / "db.sqlite"
    other = Corpus(tmp_path / "other")
    other.write("x", session("hi"))
    subprocess.run([CCWEB_INDEX, "build", "--sessions-dir", str(other.path), "--db", str(db)], check=True, env=clean_env(), capture_output=True)
    corpus = Corpus(tmp_path / "sessions")
    corpus.write(SOURCE, session("plan"))
    proc = subprocess.Popen([CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path), "--db", str(db)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())  # fmt: skip
    Pipe(proc).send(INITIALIZE)
    try:
        _, stderr = proc.communicate(timeout=ANSWER_SECONDS)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert b"belongs to the sessions directory" in stderr and b"Traceback" not in stderr, stderr
