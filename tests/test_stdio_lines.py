"""The stdio transport read and written by the event loop (server/stdio_lines.py): it reads lines
as the SDK's transport does, writes each answer whole, leaves the client's open files as they were,
and hands stdin and stdout it cannot serve without blocking to the SDK's transport."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import pty
import signal
import socket
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from ccweb_index.indexer.tuning import WAIT_PROGRESS_ENV
from ccweb_index.server.stdio_lines import LineReader, LineWriter, _end
from ccweb_index.server.stop import STOP_GRACE_SECONDS
from tests.conftest import CCWEB_INDEX, Corpus, client_launch, server_pid, session, wait_until

# --- lines, as the SDK's text wrapper reads them ------------------------------------------------


class _Chunks:
    """An end that gives the chunks it was given, one per read, then the end of input."""

    fd = -1

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    def read(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


_PIECES = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b"{", b'"a"', b":", b"1}", b" ", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80",
     b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"x" * 70_000]
)  # fmt: skip


@given(pieces=st.lists(_PIECES, max_size=40), cuts=st.lists(st.integers(0, 80_000), max_size=8))
def test_lines_are_those_the_sdks_text_wrapper_reads(pieces: list[bytes], cuts: list[int]) -> None:
    """Universal newlines, UTF-8 with replacement, a character or a CRLF cut between two reads, a
    last line without its newline: the lines are those of `TextIOWrapper(..., errors="replace")`."""
    data = b"".join(pieces)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    expected = list(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace"))

    async def read_all() -> list[str]:
        reader = LineReader(_Chunks(chunks))  # type: ignore[arg-type]
        lines = []
        while True:
            try:
                lines.append(await reader.line())
            except anyio.EndOfStream:
                return lines

    assert asyncio.run(read_all()) == expected


def test_a_line_the_adapter_refuses_is_handed_on_as_its_error() -> None:
    good = b'{"jsonrpc":"2.0","id":7,"method":"ping"}\n'

    async def receive_two() -> list[object]:
        reader = LineReader(_Chunks([b"not json\n" + good]))  # type: ignore[arg-type]
        return [await reader.receive(), await reader.receive()]

    refused, taken = asyncio.run(receive_two())
    assert isinstance(refused, Exception)
    assert isinstance(taken, SessionMessage) and isinstance(taken.message, types.JSONRPCRequest)
    assert taken.message.id == 7


# --- real pipes and sockets ----------------------------------------------------------------------


@contextmanager
def _small_pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)  # so a long answer is written in many parts
    try:
        yield read, write
    finally:
        for fd in (read, write):
            os.close(fd)


def _reading(fd: int, into: bytearray, slowly: bool) -> threading.Thread:
    def read() -> None:
        while chunk := os.read(fd, 1024):
            into.extend(chunk)
            if slowly:
                time.sleep(0.0005)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _notification(text: str) -> SessionMessage:
    return SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"t": text}))


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_answers_longer_than_the_buffer_are_written_whole_and_never_interleaved(kind: str) -> None:
    """Two senders at once, each with an answer many times what the pipe or socket holds, to a
    reader that takes its time: each line arrives whole, one after the other."""
    texts = ["a" * 200_000, "é" * 150_000]
    received = bytearray()
    with _small_pipe() as (read, write):
        if kind == "socket":
            ours, theirs = socket.socketpair()
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            read_fd, write_fd = theirs.fileno(), ours.fileno()
        else:
            read_fd, write_fd = read, write
        end = _end(write_fd, writing=True)
        assert end is not None
        reader = _reading(read_fd, received, slowly=True)

        async def send_both() -> None:
            writer = LineWriter(end)
            async with anyio.create_task_group() as tasks:
                for text in texts:
                    tasks.start_soon(writer.send, _notification(text))
            assert writer.written()

        asyncio.run(send_both())
        end.close()
        if kind == "socket":
            ours.close()
        else:
            os.close(write)
            write = os.open(os.devnull, os.O_WRONLY)  # the context closes it
        reader.join(10)
        if kind == "socket":
            theirs.close()
    lines = received.decode().splitlines()
    assert sorted(json.loads(line)["params"]["t"] for line in lines) == sorted(texts)


def test_a_request_arriving_in_pieces_is_read_when_it_is_whole() -> None:
    line = b'{"jsonrpc":"2.0","id":"x\xc3\xa9","method":"ping"}\n'
    with _small_pipe() as (read, write):
        end = _end(read, writing=False)
        assert end is not None

        def dribble() -> None:
            for i in range(len(line)):
                os.write(write, line[i : i + 1])
                time.sleep(0.002)

        threading.Thread(target=dribble, daemon=True).start()

        async def receive() -> object:
            with anyio.fail_after(10):
                return await LineReader(end).receive()

        message = asyncio.run(receive())
        end.close()
    assert isinstance(message, SessionMessage) and message.message.id == "xé"  # type: ignore[union-attr]


def test_neither_a_regular_file_nor_a_terminal_is_taken(tmp_path: Path) -> None:
    plain = tmp_path / "requests"
    plain.write_bytes(b"")
    with open(plain, "rb") as f:
        assert _end(f.fileno(), writing=False) is None
    leader, follower = pty.openpty()
    try:
        assert _end(follower, writing=False) is None
    finally:
        os.close(leader)
        os.close(follower)


# --- a server, over each kind of stdin and stdout ------------------------------------------------

_REQUESTS = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": {"name": "ccweb_list_user_inputs", "arguments": {"conversationId": "a"}}},
]  # fmt: skip


def _not_nonblocking(fd: int) -> bool:
    return not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK


def _serve(corpus: Corpus, db: Path, stdin: int, stdout: int) -> subprocess.Popen[bytes]:
    corpus.write("a", session("hello over the wire"))
    command = client_launch("serve", "-v", "--sessions-dir", str(corpus.path), "--db", str(db))
    err = open(db.with_suffix(".log"), "wb")  # noqa: SIM115  # the server's, for as long as it runs
    return subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=err)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """A server a failed test left running is killed, not left behind."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _answers(read_line: Callable[[], bytes]) -> dict[int, dict]:
    answers = {}
    while len(answers) < 2:
        message = json.loads(read_line())
        answers[message["id"]] = message
    return answers


def _check(answers: dict[int, dict], db: Path, served_by: str) -> None:
    assert answers[1]["result"]["serverInfo"]["name"]
    inputs = answers[2]["result"]["structuredContent"]["inputs"]
    assert [item["content"] for item in inputs] == ["hello over the wire"]
    assert served_by in db.with_suffix(".log").read_text()


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_a_server_answers_over_it_and_leaves_the_clients_open_files_blocking(
    corpus: Corpus, tmp_path: Path, kind: str
) -> None:
    """The open files the client shares with the server (kept here, to look at) stay blocking: the
    server reads and writes its own without blocking. fd 0 and fd 1 point elsewhere while it serves."""
    db = tmp_path / "index.sqlite"
    if kind == "pipe":
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        shared = (in_read, out_write)
        send = lambda data: os.write(in_write, data)  # noqa: E731
        answers_from = os.fdopen(out_read, "rb")
        close_input = lambda: os.close(in_write)  # noqa: E731
    else:
        ours_in, theirs_in = socket.socketpair()
        ours_out, theirs_out = socket.socketpair()
        shared = (theirs_in.fileno(), theirs_out.fileno())
        send = ours_in.sendall
        answers_from = ours_out.makefile("rb")
        close_input = ours_in.close
    proc = _serve(corpus, db, shared[0], shared[1])
    try:
        send("".join(json.dumps(r) + "\n" for r in _REQUESTS).encode())
        answers = _answers(answers_from.readline)
        _check(answers, db, "stdio served by the event loop")
        assert all(_not_nonblocking(fd) for fd in shared)
        pid = server_pid(db)
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
        assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2")
        close_input()
        assert proc.wait(15) == 0
    finally:
        _reap(proc)


def test_a_server_on_a_terminal_is_served_by_the_sdks_transport(corpus: Corpus, tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    leader, follower = pty.openpty()
    out_read, out_write = os.pipe()
    proc = _serve(corpus, db, follower, out_write)
    os.close(follower)
    os.close(out_write)
    try:
        for request in _REQUESTS:
            os.write(leader, json.dumps(request).encode() + b"\n")
        with os.fdopen(out_read, "rb") as answers_from:
            answers = _answers(answers_from.readline)
        _check(answers, db, "the SDK's stdio transport serves them")
    finally:
        os.close(leader)  # the terminal hangs up: the server's stdin ends
        if not wait_until(lambda: proc.poll() is not None, 15):
            proc.kill()
        proc.wait()


# --- a client that stops reading, hangs up, or leaves ---------------------------------------------

_INITIALIZE = json.dumps(_REQUESTS[0]) + "\n" + json.dumps(_REQUESTS[1]) + "\n"


def _pipelined(count: int, method: str = "tools/list", first_id: int = 10) -> bytes:
    lines = [json.dumps({"jsonrpc": "2.0", "id": first_id + i, "method": method}) for i in range(count)]
    return (_INITIALIZE + "".join(line + "\n" for line in lines)).encode()


def _serve_over_pipes(corpus: Corpus, db: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """A server, and the ends of its stdin and stdout the client keeps."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    proc = _serve(corpus, db, in_read, out_write)
    os.close(in_read)
    os.close(out_write)
    return proc, in_write, out_read


def _unread(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


def _quiet(db: Path) -> str:
    log = db.with_suffix(".log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-2000:]
    return log


def test_a_hang_up_while_an_answer_is_written_leaves_no_line_cut(corpus: Corpus, tmp_path: Path) -> None:
    """The client pipelines many requests, stops reading, and closes stdin (the end of a session)
    while the server is blocked in the middle of an answer. The SDK cancels the requests still
    open; the line already begun is finished, so every line the client then reads parses."""
    db = tmp_path / "index.sqlite"
    proc, in_write, out_read = _serve_over_pipes(corpus, db)
    try:
        os.write(in_write, _pipelined(40))  # tools/list answers of about 12 KB each
        assert wait_until(lambda: _unread(out_read) >= 60_000, 15)
        # Full, it may have stopped between two lines: a page taken lets a page of the next one in.
        full = _unread(out_read)
        received = os.read(out_read, 4096)
        assert wait_until(lambda: _unread(out_read) > full - len(received), 15)
        os.close(in_write)
        time.sleep(0.3)  # the server takes the end of its input, and cancels what is open
        with os.fdopen(out_read, "rb") as answers:
            received += answers.read()
        assert proc.wait(15) == 0
    finally:
        _reap(proc)
    lines = received.split(b"\n")
    assert lines[-1] == b"", f"the last line was cut after {len(lines[-1])} bytes"
    assert all(json.loads(line) for line in lines[:-1])


def test_a_client_that_closes_stdout_with_answers_pending_is_left_quietly(corpus: Corpus, tmp_path: Path) -> None:
    """It stopped reading (stdout full), then closed its end and kept stdin open: the server exits
    0 with nothing in the agent's log, as `server.stop` promises."""
    db = tmp_path / "index.sqlite"
    proc, in_write, out_read = _serve_over_pipes(corpus, db)
    try:
        os.write(in_write, _pipelined(40))
        assert wait_until(lambda: _unread(out_read) >= 60_000, 15)  # the answers have filled the pipe
        os.close(out_read)
        assert proc.wait(15) == 0
    finally:
        _reap(proc)
        os.close(in_write)
    _quiet(db)


def test_a_socket_whose_peer_stopped_reading_drops_the_answers_quietly(corpus: Corpus, tmp_path: Path) -> None:
    """A peer's shutdown(SHUT_RD) wakes no watch on stdout; the next answers meet EPIPE and are
    dropped as the SDK drops them, until the client ends stdin."""
    db = tmp_path / "index.sqlite"
    ours_in, theirs_in = socket.socketpair()
    ours_out, theirs_out = socket.socketpair()
    proc = _serve(corpus, db, theirs_in.fileno(), theirs_out.fileno())
    theirs_in.close()
    theirs_out.close()
    try:
        ours_in.sendall(_INITIALIZE.encode())
        assert ours_out.makefile("rb").readline()
        ours_out.shutdown(socket.SHUT_RD)
        ours_in.sendall(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n{"jsonrpc":"2.0","id":3,"method":"ping"}\n')
        assert wait_until(lambda: "dropped" in db.with_suffix(".log").read_text(), 15)
        ours_in.close()
        assert proc.wait(15) == 0
    finally:
        _reap(proc)
        ours_out.close()
    _quiet(db)


def test_a_stop_with_a_waits_progress_stuck_behind_a_full_stdout_still_exits(corpus: Corpus, tmp_path: Path) -> None:
    """A wait sends progress to a client that stopped reading: its notes cannot go out, so the wait
    can never end. SIGTERM still ends the server, within the drain's bounds."""
    db = tmp_path / "index.sqlite"
    corpus.write("a", session("hello"))
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    env = {**os.environ, WAIT_PROGRESS_ENV: "20"}
    command = [CCWEB_INDEX, "serve", "--sessions-dir", str(corpus.path), "--db", str(db)]
    assert command[0] is not None
    proc = subprocess.Popen(command, stdin=in_read, stdout=out_write, stderr=subprocess.DEVNULL, env=env)
    os.close(in_read)
    os.close(out_write)
    wait = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "ccweb_wait_for_conversations", "arguments": {"timeoutSeconds": 600}, "_meta": {"progressToken": "p"}}}  # fmt: skip
    try:
        os.write(in_write, _INITIALIZE.encode() + json.dumps(wait).encode() + b"\n" + _pipelined(40)[len(_INITIALIZE) :])
        assert wait_until(lambda: _unread(out_read) >= 60_000, 15)
        time.sleep(0.2)  # progress notes pile up behind the answers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(3 * STOP_GRACE_SECONDS + 5) == 0
    finally:
        _reap(proc)
        os.close(in_write)
        os.close(out_read)
