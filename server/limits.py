"""Limits that keep one client, or a flood, from locking the shared server's other clients out.

Connections (uvicorn's h11 protocol, subclassed):

- A client has `read_timeout` seconds, from connecting or from its previous answer, to send a
  complete request (headers and body); a slowloris that trickles header lines is cut off then.
  uvicorn's own `timeout_keep_alive` closes a connection idle after an answer.
- At most `max_connections` are open. One more evicts the connection that has waited longest
  without a request in progress (idle, or still sending one), so a flood of idle connections cannot
  keep a new client out; when every connection is busy with a call, the new one gets a 503.
- Descriptors: the soft RLIMIT_NOFILE is raised to the hard limit at start, and `max_connections`
  is lowered so that connections, one accept burst per listening socket and `fd_reserve`
  descriptors for the service's own files (index, session files, watcher, logs) fit under it.
- A line anyone who can connect can cause at will (asyncio's "socket.accept() out of system
  resource", the SDK's refusal of a foreign Host or Origin, uvicorn's "Invalid HTTP request", the
  SDK's traceback for a body cut short) is logged at most once a minute per kind, with a count.
- On a unix socket, a peer whose uid (SO_PEERCRED) is not this process's is disconnected.

Calls (`CallLimiter`): at most `max_calls_per_client` tool calls in flight per client (bearer
credential and source conversation) and `max_calls` overall; one more is refused at once.
"""

from __future__ import annotations

import contextvars
import logging
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger("ccweb_index")

# asyncio's accept loop takes up to `backlog` connections per wake-up, before any of them reaches
# our protocol (where the cap applies): the burst the descriptor budget must leave room for.
ACCEPT_BACKLOG = 64
# How long a refused or evicted connection, or a refused call, keeps /healthz saying "saturated".
SATURATION_WINDOW_SECONDS = 10.0
# A rate-limited warning is logged at most once per this many seconds, with the count meanwhile.
LOG_INTERVAL_SECONDS = 60.0
ACCEPT_ERROR = "socket.accept() out of system resource"
# (logger, how its line starts) for each line `client_lines_throttled` holds to one per interval.
THROTTLED_LINES = (
    ("asyncio", ACCEPT_ERROR),
    ("mcp.server.transport_security", "Invalid Host header"),
    ("mcp.server.transport_security", "Invalid Origin header"),
    ("mcp.server.transport_security", "Missing Host header"),
    ("uvicorn.error", "Invalid HTTP request received"),
    ("mcp.server.streamable_http", "Error handling POST request"),
    ("mcp.server.streamable_http", "SSE response error"),
)
# A throttled line shows this much of its message: a client chooses what a refused header holds.
_SHOWN_CHARS = 200
# Waits (issue 13) hold no worker thread and have their own cap in the tool: they are not calls here.
UNCAPPED_TOOLS = frozenset({"ccweb_wait_for_conversations"})


@dataclass(frozen=True)
class Limits:
    read_timeout: float = 10.0
    keep_alive_timeout: int = 5  # uvicorn takes whole seconds
    max_connections: int = 512
    fd_reserve: int = 128
    max_calls: int = 32
    max_calls_per_client: int = 8


class LimitsError(Exception):
    """Limits that cannot work on this machine; the message says what to change."""


# --- descriptors ---------------------------------------------------------------------------------


def fit_to_descriptors(limits: Limits, listeners: int, nofile: int) -> Limits:
    """`limits` with `max_connections` lowered, if need be, to fit `nofile` descriptors."""
    room = nofile - limits.fd_reserve - listeners * ACCEPT_BACKLOG
    if room < 1:
        raise LimitsError(
            f"the open-files limit ({nofile}) leaves no room for connections after --fd-reserve "
            f"{limits.fd_reserve} and {listeners} x {ACCEPT_BACKLOG} for accepting: raise the hard limit "
            "(ulimit -Hn, LimitNOFILE= in systemd) or lower --fd-reserve"
        )
    if limits.max_connections > room:
        log.warning(
            "--max-connections %d lowered to %d: the open-files limit is %d, with %d kept for the index "
            "and session files (--fd-reserve) and %d for accepting",
            limits.max_connections, room, nofile, limits.fd_reserve, listeners * ACCEPT_BACKLOG,
        )  # fmt: skip
        return replace(limits, max_connections=room)
    return limits


# --- rate-limited logging ------------------------------------------------------------------------------


class Throttle:
    """Whether to log a recurring event now, and how many were left unlogged since the last time."""

    def __init__(self, interval: float = LOG_INTERVAL_SECONDS) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._unlogged = 0

    def __call__(self) -> int | None:
        """None: stay quiet (counted). Else the number of events left unlogged before this one."""
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.interval:
                self._unlogged += 1
                return None
            self._last, unlogged, self._unlogged = now, self._unlogged, 0
            return unlogged


class ThrottledLines(logging.Filter):
    """Lets one line of each kind (`starts`) through per interval, saying how many it held back,
    cut to `_SHOWN_CHARS` and without its traceback; other lines pass untouched."""

    def __init__(self, starts: list[str], interval: float = LOG_INTERVAL_SECONDS) -> None:
        super().__init__()
        self.interval = interval
        self._throttles = {start: Throttle(interval) for start in starts}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        start = next((start for start in self._throttles if message.startswith(start)), None)
        if start is None:
            return True
        unlogged = self._throttles[start]()
        if unlogged is None:
            return False
        exc = record.exc_info[1] if record.exc_info else None
        # The exception's text can quote the request too (a validation error shows its input).
        shown = (message.splitlines()[0] + ("" if exc is None else f" ({type(exc).__name__}: {exc})"))[:_SHOWN_CHARS]
        record.msg = "%s; %d more since the last such line; logged at most once every %d s"
        record.args = (shown, unlogged, int(self.interval))
        record.exc_info = record.exc_text = None
        return True


@contextmanager
def client_lines_throttled(interval: float = LOG_INTERVAL_SECONDS) -> Iterator[None]:
    """`ThrottledLines` on the loggers of `THROTTLED_LINES`, for as long as the server runs."""
    starts: dict[str, list[str]] = {}
    for name, start in THROTTLED_LINES:
        starts.setdefault(name, []).append(start)
    filters = {name: ThrottledLines(kinds, interval) for name, kinds in starts.items()}
    for name, log_filter in filters.items():
        logging.getLogger(name).addFilter(log_filter)
    try:
        yield
    finally:
        for name, log_filter in filters.items():
            logging.getLogger(name).removeFilter(log_filter)


# --- connections ---------------------------------------------------------------------------------------


def peer_uid(transport: Any) -> int | None:
    """The uid of a unix-socket peer (SO_PEERCRED), None for another kind of socket."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class Connections:
    """The open connections, oldest idle first, and what was refused or evicted."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: set[Any] = set()
        self.idle: OrderedDict[Any, None] = OrderedDict()  # no request in progress, longest waiting first
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.refused_peers = 0
        self.last_pressure = -float("inf")
        self._log = Throttle()

    def admit(self, conn: Any) -> bool:
        """Register `conn`; False when it must be refused (every other connection is busy)."""
        if len(self.open) >= self.cap:
            self.last_pressure = time.monotonic()
            if not self.idle:
                self.refused += 1
                self._warn("refused a connection: all %d connections have a call in progress (--max-connections)")
                return False
            oldest, _ = self.idle.popitem(last=False)
            self.open.discard(oldest)
            self.evicted += 1
            self._warn("closed the longest-idle connection to admit a new one: %d connections open (--max-connections)")
            oldest.evict()
        self.open.add(conn)
        self.idle[conn] = None
        return True

    def busy(self, conn: Any) -> None:
        self.idle.pop(conn, None)

    def waiting(self, conn: Any) -> None:
        if conn in self.open:
            self.idle[conn] = None
            self.idle.move_to_end(conn)

    def gone(self, conn: Any) -> None:
        self.open.discard(conn)
        self.idle.pop(conn, None)

    def saturated(self) -> bool:
        return len(self.open) >= self.cap or time.monotonic() - self.last_pressure < SATURATION_WINDOW_SECONDS

    def _warn(self, message: str) -> None:
        unlogged = self._log()
        if unlogged is not None:
            log.warning(message + "; %d more such since the last line", self.cap, unlogged)


def protocol_class(connections: Connections, limits: Limits, uid: int | None) -> type:
    """uvicorn's h11 protocol with the read timeout, the connection cap and (`uid`) the peer check."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    peer_log = Throttle()

    class LimitedH11Protocol(H11Protocol):
        _deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if uid is not None and peer_uid(transport) != uid:
                connections.refused_peers += 1
                unlogged = peer_log()
                if unlogged is not None:
                    log.warning("refused a unix-socket connection from uid %s; %d more since the last line",
                                peer_uid(transport), unlogged)  # fmt: skip
                transport.abort()
                return
            if not connections.admit(self):
                transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                self._disarm()  # the request is complete: its answer may take as long as it takes
                connections.busy(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                connections.waiting(self)
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            connections.gone(self)
            super().connection_lost(exc)

        def evict(self) -> None:
            self._disarm()
            self.transport.abort()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.read_timeout, self._read_timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _read_timed_out(self) -> None:
            self._deadline = None
            connections.timed_out += 1
            self.transport.abort()

    return LimitedH11Protocol


# --- calls -----------------------------------------------------------------------------------------------


class Slot:
    """One admitted call. Held by the HTTP request and by the worker thread that answers it: the call
    counts until both are done (a client that hangs up does not stop the thread)."""

    def __init__(self, limiter: CallLimiter, key: str) -> None:
        self._limiter = limiter
        self.key = key
        self._holders = 1

    def hold(self) -> None:
        with self._limiter.lock:
            self._holders += 1

    def release(self) -> None:
        with self._limiter.lock:
            self._holders -= 1
            if self._holders == 0:
                self._limiter.ended(self.key)


CURRENT_SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("ccweb_index_call_slot", default=None)


class CallLimiter:
    def __init__(self, per_client: int, total: int) -> None:
        self.per_client = per_client
        self.total = total
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.count = 0
        self.refused = 0
        self.last_pressure = -float("inf")

    def try_start(self, key: str) -> Slot | str:
        """A slot for a call by client `key`, or why there is none (the whole message for the caller)."""
        with self.lock:
            mine = self.in_flight.get(key, 0)
            if mine < self.per_client and self.count < self.total:
                self.in_flight[key] = mine + 1
                self.count += 1
                return Slot(self, key)
            self.refused += 1
            self.last_pressure = time.monotonic()
        if mine >= self.per_client:
            return (
                f"This client already has {mine} calls in progress, the most one client (one source "
                f"conversation) may have at once (--max-calls-per-client); this call was not started. "
                "Call again once an earlier call has answered."
            )
        return (
            f"The server already has {self.total} calls in progress, the most it takes at once "
            "(--max-calls); this call was not started. Call again in a moment."
        )

    def ended(self, key: str) -> None:
        """Under `lock`."""
        self.count -= 1
        left = self.in_flight[key] - 1
        if left:
            self.in_flight[key] = left
        else:
            del self.in_flight[key]

    def saturated(self) -> bool:
        return self.count >= self.total or time.monotonic() - self.last_pressure < SATURATION_WINDOW_SECONDS


class CountedService:
    """The service, seen through the call slots: a call's worker thread holds its slot while it runs."""

    def __init__(self, service: Any) -> None:
        self._service = service

    def call(self, name: str, arguments: Any, source: str | None) -> Any:
        slot = CURRENT_SLOT.get()
        if slot is None:
            return self._service.call(name, arguments, source)
        slot.hold()
        try:
            return self._service.call(name, arguments, source)
        finally:
            slot.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


def client_key(headers: list[tuple[bytes, bytes]], credential: str, source_header: bytes) -> str:
    """Who a call counts against: the credential it came with and the source it names (as sent)."""
    values = {v.strip() for k, v in headers if k == source_header}
    source = values.pop().decode("latin-1") if len(values) == 1 else ""
    return f"{credential}\0{source}"


