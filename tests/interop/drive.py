"""Drive a real MCP client process (client.mjs: TypeScript SDK 1.x; py_client.py: Python SDK) by lines.

`Client.start("typescript" | "python" | "python-sdk1")` spawns it ("python-sdk1": py_client.py on
the Python SDK 1.x, in tests/interop/.venv); `.send(command)` writes one JSON command and reads
its one-line answer. The commands are described in client.mjs.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# A client answers within this; a call that hangs is a failure, not a stuck test run.
ANSWER_SECONDS = 60.0
INSTALL_HINT = "install Node.js and run `npm ci --prefix tests/interop` (.ci/run does both)"
SDK1_PYTHON = HERE / ".venv" / "bin" / "python"
SDK1_HINT = (
    "make the Python SDK 1.x client's environment: `python3 -m venv tests/interop/.venv && "
    "tests/interop/.venv/bin/pip install -r tests/interop/python-sdk-1.txt` (.ci/run does it)"
)


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise AssertionError(f"node is not installed: {INSTALL_HINT}")
    if not (HERE / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").exists():
        raise AssertionError(f"the TypeScript SDK is not installed in tests/interop: {INSTALL_HINT}")
    return found


def python_sdk1() -> str:
    if not SDK1_PYTHON.exists():
        raise AssertionError(f"the Python SDK 1.x is not installed in tests/interop: {SDK1_HINT}")
    return str(SDK1_PYTHON)


def ts_sdk_version() -> str:
    return json.loads((HERE / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").read_text())["version"]


class Client:
    def __init__(self, proc: subprocess.Popen[str], name: str, mode: str | None) -> None:
        self.proc = proc
        self.name = name if mode is None else f"{name} ({mode})"
        self.mode = mode
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(cls, name: str, mode: str | None = None, stderr: Any = None) -> Client:
        """`mode`: see py_client.py (the TypeScript client 1.x always uses the handshake)."""
        if name == "typescript":
            command = [node(), str(HERE / "client.mjs")]
        else:
            command = [python_sdk1() if name == "python-sdk1" else sys.executable, str(HERE / "py_client.py")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=HERE
        )
        return cls(proc, name, mode)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=ANSWER_SECONDS)
        except queue.Empty:
            raise AssertionError(f"the {self.name} client did not answer {command['op']} in {ANSWER_SECONDS} s") from None
        if line is None:
            raise AssertionError(f"the {self.name} client exited (status {self.proc.poll()}) on {command}")
        return json.loads(line)

    def ok(self, command: dict[str, Any]) -> dict[str, Any]:
        answer = self.send(command)
        assert answer["ok"], f"{self.name} client, {command}: {answer['error']}"
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"op": "close"})
            except AssertionError:
                pass
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
