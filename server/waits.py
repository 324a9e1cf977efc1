"""ccweb_wait_for_conversations: a call that returns when a selected conversation changes.

A wait holds no thread while it waits: it is a task on the server's event loop, asleep on an event
that the change hub (server.changes) sets from its thread when a change concerns it, that the
server sets at shutdown, or that a time-out ends. Each look at the index runs in a worker thread
(the service is synchronous) and is short:

1. First, a look made fresh as a list call is (the watcher's cookie, or the files' signatures): every
   change before the call is in the index, and one after `since` is answered at once.
2. Then it sleeps. Woken by the hub, it reads the changes after `since` (no need to make the index
   fresh: the hub saw them in it). Without a watcher that proves freshness, it also looks at the
   files every `POLL_SECONDS`, as a list call would.
3. At the time-out (or at shutdown) a last look answers, with `timedOut` when nothing changed.

Every `PROGRESS_SECONDS` it sends a progress notification when the request asked for them. The
`WaitRoom` caps the waits open at once in a server and ends them all at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio

from ccweb_index.indexer.tuning import WAIT_POLL_ENV, WAIT_PROGRESS_ENV, milliseconds_from_env
from ccweb_index.server.changes import Waiter
from ccweb_index.server.from_index import WaitCheck, WaitState
from ccweb_index.server.tools import UNKNOWN_POSITION, ToolError, WaitRequest, too_many_waits, wait_request

if TYPE_CHECKING:
    from ccweb_index.server.service import Service

# Without a watcher that proves the index current, a wait looks at the files this often. Both
# intervals can be shortened through the environment (indexer.tuning), so that tests wait less.
POLL_SECONDS = milliseconds_from_env(WAIT_POLL_ENV, 1_000, minimum=1) / 1000
# A progress notification this often, for a request that carries a progress token.
PROGRESS_SECONDS = milliseconds_from_env(WAIT_PROGRESS_ENV, 10_000, minimum=1) / 1000

# (seconds waited, seconds it may wait at most): sends a progress notification, or does nothing.
Report = Callable[[float, float], Awaitable[None]]


async def no_progress(waited: float, timeout: float) -> None:
    return None


class _Slot:
    """One open wait's alarm: set from any thread, awaited on the loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self._loop.call_soon_threadsafe(self._event.set)

    async def sleep(self, seconds: float) -> bool:
        """Sleep until woken or for `seconds`; whether it was woken (and then reset the alarm)."""
        with anyio.move_on_after(max(seconds, 0.0)):
            await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        return woken


class WaitRoom:
    """The waits open in one server: at most `cap`, all ended by `stop()` (at SIGTERM)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.stopping = False
        self._open: set[_Slot] = set()
        self._emptied: asyncio.Event | None = None

    @contextlib.contextmanager
    def enter(self) -> Iterator[_Slot]:
        if len(self._open) >= self.cap:
            raise too_many_waits(self.cap)
        slot = _Slot()
        self._open.add(slot)
        try:
            yield slot
        finally:
            self._open.discard(slot)
            if not self._open and self._emptied is not None:
                self._emptied.set()

    def stop(self) -> None:
        """Answer every open wait now (`timedOut` unless something changed), and every later one at
        once. Safe from a signal handler or another thread."""
        self.stopping = True
        for slot in list(self._open):
            slot.wake()

    async def emptied(self) -> None:
        """Return once no wait is open (call after `stop`)."""
        while self._open:
            self._emptied = asyncio.Event()
            await self._emptied.wait()

    @property
    def open_count(self) -> int:
        return len(self._open)


async def wait_for_conversations(
    service: Service, room: WaitRoom, arguments: dict[str, Any], source: str | None, report: Report = no_progress
) -> tuple[dict[str, Any], bool]:
    """The tool: (its answer or error payload, whether it is an error)."""
    try:
        request = wait_request(arguments, source)
        with room.enter() as slot:
            return await _Wait(service, room, request, slot, report).run(), False
    except ToolError as exc:
        return exc.payload(), True


class _Wait:
    def __init__(self, service: Service, room: WaitRoom, request: WaitRequest, slot: _Slot, report: Report) -> None:
        self.service = service
        self.room = room
        self.request = request
        self.slot = slot
        self.report = report
        self.since = request.since  # None until the index tells where "now" is
        self.started = anyio.current_time()
        self.deadline = self.started + request.timeout_seconds

    async def run(self) -> dict[str, Any]:
        final = self.room.stopping or self.request.timeout_seconds <= 0
        state = await self._look(fresh=True, final=final)
        if state.answer is None:
            waiter = Waiter(self.request.selection, state.position or UNKNOWN_POSITION, self.slot.wake)
            self.service.changes.add(waiter)
            try:
                state = await self._until_changed(state, waiter)
            finally:
                self.service.changes.discard(waiter)
        if state.answer is None:
            state = await self._look(fresh=not self.room.stopping, final=True)
        assert state.answer is not None
        return state.answer

    async def _look(self, *, fresh: bool, final: bool) -> WaitState:
        check = WaitCheck(self.request, self.since, fresh=fresh, final=final)
        state = await anyio.to_thread.run_sync(self.service.wait_check, check)
        if self.since is None:
            self.since = state.position
        return state

    async def _until_changed(self, state: WaitState, waiter: Waiter) -> WaitState:
        """Sleep and look until something changed (the state then carries the answer), the
        deadline passes, or the room stops."""
        next_progress = self.started + PROGRESS_SECONDS
        next_poll = self.started + POLL_SECONDS
        synced = state.synced
        while not self.room.stopping and anyio.current_time() < self.deadline:
            wake_at = min(self.deadline, next_progress, math.inf if synced else next_poll)
            woken = await self.slot.sleep(wake_at - anyio.current_time())
            now = anyio.current_time()
            if self.room.stopping:
                break
            if now >= next_progress:
                await self.report(now - self.started, self.request.timeout_seconds)
                next_progress += PROGRESS_SECONDS
            polling = not synced and now >= next_poll
            if woken or polling:
                state = await self._look(fresh=polling, final=False)
                if state.answer is not None:
                    return state
                if polling:
                    synced, next_poll = state.synced, now + POLL_SECONDS
                if state.position is not None:
                    waiter.seen = state.position
        return state
