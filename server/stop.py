"""SIGTERM ends a stdio server: the call in flight answers, then the process exits 0, even while
its client keeps stdin open (issue 10, item 6). SIGINT does the same: Claude Code sends it first
when it exits, then SIGTERM a tenth of a second later.

The SDK's stdio transport (which still serves a stdin that is neither a pipe nor a socket:
server.stdio_lines) reads stdin in a worker thread that cannot be cancelled, so a server whose stdin
stays open could never return from `anyio.run`: it used to close the index on SIGTERM
(a `sys.exit` raised wherever the main thread was, possibly inside a call, with a traceback) and
then stay alive, blocked on stdin, answering nothing. Instead, SIGTERM is received by the event
loop (so it never interrupts a call: calls run between the loop's steps), the server waits until
no call is in flight and the transport's writer has written every answer, closes the service and
leaves with `os._exit(0)`: nothing else is left to do, and the stdin thread would never let a
normal exit finish.

The other way a stdio session ends is the client's: it closes the server's stdin. What the server
still writes then must not trip a client on its way out (`SilentAfterHangUp`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ccweb_index.process import STOP_SIGNALS, leaves

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

log = logging.getLogger("ccweb_index")
CLIENT_CLOSED_STDOUT = "the client closed stdout, so nobody reads the answers"

# How long, after SIGTERM, the last answers have to be written before the process exits anyway.
STOP_GRACE_SECONDS = 0.8
_POLL_SECONDS = 0.005
# Polls in a row that must find nothing left to write (an answer between its call and its send).
_QUIET_POLLS = 3


class _StopReason:
    """The first way the session was seen to end, logged once: a client's exit often comes as two
    (Codex sends SIGTERM and closes stdin; a killed client closes stdin and stdout at once), and the
    second says nothing the first did not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._said = False

    def __call__(self, reason: str) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        log.info("stopping: %s", reason)


stopping = _StopReason()


class CallsInFlight:
    """How many tool calls this process is answering now (server.app's `guarded_call` counts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def __enter__(self) -> None:
        with self._lock:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._count -= 1

    def idle(self) -> bool:
        with self._lock:
            return self._count == 0


calls_in_flight = CallsInFlight()


def _written(write_stream: Any) -> bool:
    """Whether the transport's writer has taken and written every message sent to it. Ours
    (server.stdio_lines) says so; the SDK's wraps an anyio memory stream, whose statistics say its
    writer waits for the next one and nobody is sending; without either, a quiet moment is all there
    is to go by."""
    written = getattr(write_stream, "written", None)
    if written is not None:
        return bool(written())
    inner = getattr(write_stream, "_inner", write_stream)
    statistics = getattr(inner, "statistics", None)
    if statistics is None:
        return True
    stats = statistics()
    return bool(stats.tasks_waiting_receive) and not stats.current_buffer_used and not stats.tasks_waiting_send


async def exit_on_sigterm(
    write_stream: Any, close: Callable[[], None], end_waits: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Run beside the stdio server: on SIGTERM or SIGINT, answer the open waits (`end_waits`), let
    the answers out, `close`, and exit 0."""
    # The receiver stays open to the end: closing it would put back the signals' default actions,
    # and the SIGTERM that follows a SIGINT, or an impatient supervisor's second one, would then kill
    # the process mid-drain (status 143). SIGINT's default here was a KeyboardInterrupt raised
    # wherever the loop was: tracebacks, "Aborted!", and the open wait answered "Connection closed".
    import anyio

    received = False
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                received = True
                stopping(f"{signal.Signals(signum).name} received; answering the calls in flight first")
                break
            await _drain(write_stream, end_waits)
            _leave(close)
    finally:
        # Cancelled: the client closed stdin and the process is on its way out.
        if received:  # in the drain: nobody is left to answer, and the stop was asked for
            _leave(close)
        # Else it closes the service next, which waits for a first pass under way. The receiver has
        # put back the default actions; a signal now (the SDK clients send SIGTERM when the exit
        # takes long) leaves at once with 0 instead, as before the server runs, without closing
        # again what the process is closing.
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: _leave(lambda: None))


def exit_when_stdout_is_gone(stdout_fd: int, close: Callable[[], None]) -> Callable[[], None]:
    """Beside the stdio server, with a duplicate of its stdout taken before the SDK claims it (this
    function owns it): when nobody can read the server's answers any more (a pipe whose reader
    closed it reports POLLERR, a socket whose peer closed it POLLHUP), close and exit 0, quietly, as
    `client_gone` does. The SDK only learns it at its next write, and a client that kept stdin open
    then left the server waiting on it for good (its reader is a thread nothing cancels). A daemon
    thread: it must not keep a process that is ending otherwise from ending. Returns what stops the
    watch, for when the server ends by itself."""
    import select

    wake_read, wake_write = os.pipe()

    def watch() -> None:
        poller = select.poll()
        poller.register(stdout_fd, 0)  # no events asked: only POLLERR, POLLHUP and POLLNVAL wake it
        poller.register(wake_read, select.POLLIN)
        try:
            events = dict(poller.poll(None))
        except OSError:
            events = {}  # cannot be watched: the next write tells, as before
        finally:
            for fd in (stdout_fd, wake_read):
                os.close(fd)
        if events.get(stdout_fd, select.POLLNVAL) & select.POLLNVAL == 0 and wake_read not in events:
            stopping(CLIENT_CLOSED_STDOUT)
            _leave(close)

    def stop() -> None:
        with contextlib.suppress(OSError):  # the watch has ended already: nobody reads the pipe
            os.write(wake_write, b"x")
        os.close(wake_write)

    threading.Thread(target=watch, name="ccweb-index-stdout", daemon=True).start()
    return stop


def client_gone(exc: BaseException) -> bool:
    """Whether `exc` (an exception group from the stdio transport, as a rule) says only that the
    client is gone: it closed the server's stdout, so an answer met a broken pipe. Nobody is left to
    tell, and it is no fault of the server's."""
    import asyncio

    import anyio

    found = list(leaves(exc))
    gone = (BrokenPipeError, ConnectionResetError)
    # Asked after the loop has ended, so the cancellation is asyncio's own (the loop `serve` runs).
    followers = (*gone, anyio.BrokenResourceError, anyio.ClosedResourceError, asyncio.CancelledError)
    return any(isinstance(leaf, gone) for leaf in found) and all(isinstance(leaf, followers) for leaf in found)


class SilentAfterHangUp:
    """The stdio write stream, with no "Connection closed" errors once the client has closed stdin.

    Closing the server's stdin is how an MCP client ends a stdio session. The SDK then cancels each
    request still open (any call in flight, most often a wait) and answers it with that error, for
    a client that has stopped reading. The Python SDK 1.x client, whose session is closed by then,
    fails its own exit on the line: its `stdio_client` raises BrokenResourceError in an
    ExceptionGroup. So a request still open at the hang-up gets no answer at all; a script that
    pipes requests in and wants every answer keeps stdin open until it has them. Nothing else is
    held back.
    """

    def __init__(self, stream: Any, hung_up: Callable[[], bool]) -> None:
        self._stream = stream
        self._hung_up = hung_up

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)  # whatever else the SDK asks of its stream

    async def send(self, message: SessionMessage) -> None:
        if self._hung_up() and _is_connection_closed(message.message):
            return
        await self._stream.send(message)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> SilentAfterHangUp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _is_connection_closed(message: Any) -> bool:
    # Imported here: `watch` and the HTTP server import this module, and need none of the SDK.
    import mcp_types as types

    return isinstance(message, types.JSONRPCError) and message.error.code == types.CONNECTION_CLOSED


def _leave(close: Callable[[], None]) -> NoReturn:
    try:
        close()
    finally:
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)


async def _drain(write_stream: Any, end_waits: Callable[[], Awaitable[None]] | None) -> None:
    """Answer the open waits, wait for the calls in flight, and let the writer send every answer."""
    import anyio

    if end_waits is not None:
        # Bounded: a wait whose progress note is stuck behind a client that stopped reading would
        # never end, and the signal would never be obeyed.
        with anyio.move_on_after(STOP_GRACE_SECONDS):
            await end_waits()
    while not calls_in_flight.idle():  # a call in a worker thread answers first, however long it takes
        await anyio.sleep(_POLL_SECONDS)
    with anyio.move_on_after(STOP_GRACE_SECONDS):
        quiet = 0
        while quiet < _QUIET_POLLS:
            await anyio.sleep(_POLL_SECONDS)
            quiet = quiet + 1 if calls_in_flight.idle() and _written(write_stream) else 0


def exit_mid_pass() -> NoReturn:
    """Stop during the first indexing pass, at once and with status 0: it may take minutes on a
    large directory, and what it leaves unfinished costs nothing (SQLite rolls back the write in
    progress; the index is a cache, and the next start goes on from what was committed)."""
    log.info("stopped during the first indexing pass, which the next start goes on with")
    _leave(lambda: None)
