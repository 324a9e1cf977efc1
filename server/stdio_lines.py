"""The stdio transport: JSON-RPC lines read and written by the event loop itself.

The SDK's `stdio_server` reads stdin and writes stdout through anyio's file wrapper, a worker-thread
round trip for each line read and two for each answer written (its write, then its flush), with a
task and a memory stream between each end and the server. Measured side by side over stdio, those
hops cost about 0.35 ms of the server's CPU per call, as much as everything the product's handler
does (docs/benchmarks.md, "seventh look"). Here the loop waits for the descriptor (epoll) and reads
or writes it without blocking; `receive` and `send` do the work in the task that asks.

Without blocking, yet without touching the descriptors the client shares: O_NONBLOCK set on fd 0
would hold for every process that has the same open file (a terminal, a parent's pipe). So a pipe
is opened again through /proc/self/fd, which gives a new open file on the same pipe, with its own
flags; a socket (Node's child processes get socket pairs) is read and written with MSG_DONTWAIT,
a flag of the call. Anything else (a regular file, a terminal, no /proc) is served by the SDK's
transport, as before.

What the SDK's transport does is kept: each line is decoded as its text wrapper decodes it (UTF-8
with replacement, universal newlines) and validated by the same adapter, a line it cannot validate
is handed on as the exception, each message is written as the same JSON; fd 0 and fd 1 point at
/dev/null and at stderr while the transport serves, so a stray print or a child's output cannot reach
the wire, and they are put back at the end.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import io
import logging
import os
import socket
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:  # the SDK's protocols for its streams, from a module it keeps private
    from mcp.shared._stream_protocols import ReadStream, WriteStream

Incoming = SessionMessage | Exception

log = logging.getLogger("ccweb_index")

# What one read takes from the descriptor: a pipe holds 64 KiB by default.
_READ_BYTES = 1 << 16


class _PipeEnd:
    """A pipe or FIFO, through an open file of its own that does not block."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self) -> bytes:
        return os.read(self.fd, _READ_BYTES)

    def write(self, data: memoryview) -> int:
        return os.write(self.fd, data)

    def close(self) -> None:
        os.close(self.fd)


class _SocketEnd:
    """A stream socket, read and written with MSG_DONTWAIT: its open file's flags stay the client's."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.fd = sock.fileno()

    def read(self) -> bytes:
        return self._sock.recv(_READ_BYTES, socket.MSG_DONTWAIT)

    def write(self, data: memoryview) -> int:
        return self._sock.send(data, socket.MSG_DONTWAIT)

    def close(self) -> None:
        self._sock.close()


_End = _PipeEnd | _SocketEnd


def _end(fd: int, writing: bool) -> _End | None:
    """fd's pipe or socket, to be used without blocking; None for anything else."""
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            access = os.O_WRONLY if writing else os.O_RDONLY
            return _PipeEnd(os.open(f"/proc/self/fd/{fd}", access | os.O_NONBLOCK | os.O_CLOEXEC))
        if stat.S_ISSOCK(mode):
            sock = socket.socket(fileno=os.dup(fd))
            if sock.type == socket.SOCK_STREAM:
                return _SocketEnd(sock)
            sock.close()
    except OSError:
        pass  # no /proc, or a descriptor that cannot be opened again: the SDK's transport serves
    return None


def _ends() -> tuple[_End, _End] | None:
    reader = _end(0, writing=False)
    if reader is None:
        return None
    writer = _end(1, writing=True)
    if writer is None:
        reader.close()
        return None
    return reader, writer


def _divert(fd: int, target: Callable[[], int]) -> Callable[[], None]:
    """Point fd at `target` (a descriptor it opens); returns what points it back. At best, as the
    SDK does it: a descriptor that cannot be diverted stays where it is, and the server still serves."""
    try:
        saved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        return lambda: None
    try:
        opened = target()
        try:
            os.dup2(opened, fd)
        finally:
            os.close(opened)
    except OSError:
        os.close(saved)
        return lambda: None

    def restore() -> None:
        with contextlib.suppress(OSError):
            os.dup2(saved, fd)
        os.close(saved)

    return restore


def _stderr_or_null() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


async def _ready(fd: int, writing: bool) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if writing else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if writing else loop.remove_reader)(fd)


class Receiving:
    """What the SDK asks of a read stream, made of a subclass's `receive` and `aclose`."""

    async def receive(self) -> Incoming:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Incoming:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class LineReader(Receiving):
    """The read stream: one message per line of stdin, parsed when the server asks for it."""

    def __init__(self, end: _End) -> None:
        self._end = end
        # What `io.TextIOWrapper(stdin, encoding="utf-8", errors="replace")` does to what it reads.
        self._decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")("replace"), translate=True)
        self._partial: list[str] = []
        self._lines: deque[str] = deque()
        self._ended = False

    async def line(self) -> str:
        """The next line, as the SDK's text wrapper gives it (with its newline, but for a last line
        that has none). Raises anyio.EndOfStream after the last."""
        while not self._lines:
            if self._ended:
                raise anyio.EndOfStream
            await self._read()
        return self._lines.popleft()

    async def receive(self) -> Incoming:
        line = await self.line()
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except Exception as exc:  # handed on, as the SDK's reader does (server.unparsed answers it)
            return exc

    async def _read(self) -> None:
        try:
            data = self._end.read()
        except BlockingIOError:
            await _ready(self._end.fd, writing=False)
            return
        except (ConnectionResetError, BrokenPipeError):
            data = b""  # the client is gone: as at the end of its input
        *whole, rest = self._decoder.decode(data, final=not data).split("\n")
        if whole:
            whole[0] = "".join(self._partial) + whole[0]
            self._partial.clear()
            self._lines.extend(line + "\n" for line in whole)
        if rest:
            self._partial.append(rest)  # a long line's pieces are joined once, when it ends
        if not data:
            self._ended = True
            if self._partial:
                self._lines.append("".join(self._partial))

    async def aclose(self) -> None:
        self._ended = True
        self._lines.clear()


class LineWriter:
    """The write stream: each message written whole, as one line, before `send` returns."""

    def __init__(self, end: _End) -> None:
        self._end = end
        # A line is written by one sender at a time, never interleaved; taking a free lock does not
        # give the loop a turn (a wait's answer and a call's may be sent at once).
        self._lock = anyio.Lock(fast_acquire=True)
        self._sending = 0
        self._closed = False
        self._gone = False  # the client can no longer read: every later message is dropped

    def written(self) -> bool:
        """Whether every message sent has been written (server.stop waits for it)."""
        return self._sending == 0

    async def send(self, message: SessionMessage) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        self._sending += 1
        try:
            async with self._lock:
                await self._write(memoryview(line.encode("utf-8")))
        finally:
            self._sending -= 1

    async def _write(self, data: memoryview) -> None:
        # The SDK's dispatcher takes BrokenResourceError as "the client is gone" and drops the
        # message quietly; a BrokenPipeError would be logged as the handler's failure, with its
        # traceback, once per answer still to send. The process then ends as it would anyway: at the
        # end of stdin, or by server.stop's watch on stdout.
        if self._gone:
            raise anyio.BrokenResourceError
        while data:
            try:
                data = data[self._end.write(data) :]
            except BlockingIOError:
                # Shielded: the dispatcher cancels its handlers when stdin ends, and a line cut there
                # is one no client can parse. The SDK's writer task finishes its line the same way.
                with anyio.CancelScope(shield=True):
                    await _ready(self._end.fd, writing=True)
            except (BrokenPipeError, ConnectionResetError) as exc:
                self._gone = True
                raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> LineWriter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[ReadStream[Incoming], WriteStream[SessionMessage]]]:
    """What `mcp.server.stdio.stdio_server()` yields, served by the event loop when stdin and stdout
    are pipes or sockets, else by the SDK's own transport."""
    ends = _ends()
    if ends is None:
        log.debug("stdin and stdout are not both pipes or sockets: the SDK's stdio transport serves them")
        async with stdio_server() as streams:
            yield streams
        return
    reader, writer = ends
    log.debug("stdio served by the event loop (stdin: %s, stdout: %s)", type(reader).__name__, type(writer).__name__)
    restore_stdin = _divert(0, lambda: os.open(os.devnull, os.O_RDONLY))
    restore_stdout = _divert(1, _stderr_or_null)
    try:
        yield LineReader(reader), LineWriter(writer)
    finally:
        restore_stdout()
        restore_stdin()
        reader.close()
        writer.close()
