"""watchdog's inotify reader thread, able to tell when nothing can be pending (docs/design.md,
"When no cookie is needed").

`drained()` is true only when every event the reader took from the kernel has been handled, the
reader is parked in its wait for the kernel queue, and that queue holds no byte. Then every event
the kernel queued before the check has been handled, so a change that completed before it is in the
dirty set, as it is once a cookie comes back, without the cookie's file, its event and two thread
hand-offs. Anything else (events queued, a batch being handled, the reader somewhere else) says
False, and the caller sends a cookie.

watchdog has handled events in two ways, and this relies on its private structure, so `drained()`
says yes only on the releases named in KNOWN_RELEASES, with the way each hands events on:

- 7.1.0: the reader thread handles the events of a read before it waits again;
- 7.1.1: the reader only reads, into `_raw_queue`, and a dispatcher thread takes each chunk from it
  and handles it. Parked then says nothing about what was handled: the queue counts the chunks put
  in, and the chunks the dispatcher has finished (it comes back for the next one only when the
  last is handled).

7.1.1 also gave the wait a timeout parameter (a bounded wait gathers a burst). Only the unbounded
wait, the one between two reads, is a place to be parked. A reader that stops on an exception says
so in one line, never a thread's traceback, tells its owner (`on_failure`), and `alive` turns False.

Imported where a watcher is made: watchdog is not loaded before then.
"""

from __future__ import annotations

import array
import fcntl
import logging
import termios
import threading
from collections.abc import Callable
from typing import Any

from watchdog.observers.inotify_c import InotifyFD
from watchdog.version import VERSION_INFO

log = logging.getLogger("ccweb_index")

# The releases whose structure `drained` was written for and tested on, and how each hands events
# on. Any other release, even one pyproject.toml admits, sends a cookie for every call: a renamed
# attribute would otherwise pass for the other way and give stale answers (a review showed it with
# a 7.1.1 whose `_raw_queue` was renamed: 219 stale answers in 124,347 calls).
HANDS_ON_INLINE, HANDS_ON_THROUGH_A_QUEUE = "inline", "queue"
KNOWN_RELEASES: dict[tuple[int, ...], str] = {(7, 1, 0): HANDS_ON_INLINE, (7, 1, 1): HANDS_ON_THROUGH_A_QUEUE}


class InotifyReader(InotifyFD):
    """`on_failure` is called (on the reader's thread) if the reader ends on an exception."""

    def __init__(self, on_failure: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._parked_lock = threading.Lock()
        self._parked = False  # in the unbounded wait for the kernel queue
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        self._chunks: _CountedQueue | None = None
        way = KNOWN_RELEASES.get(tuple(VERSION_INFO))
        if way == HANDS_ON_THROUGH_A_QUEUE:  # the reader and the dispatcher use only its put and gets
            self._chunks = self._raw_queue = _CountedQueue(self._raw_queue)  # type: ignore[assignment]
        self._proves = way is not None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:  # the thread ends here either way: said once, as a line
            self.failure = exc
            log.warning("the inotify reader stopped (%s: %s)", type(exc).__name__, exc)
            self._on_failure()

    @property
    def failed(self) -> bool:
        # 7.1.1's dispatcher records its failure and stops the watches before the reader raises it.
        return self.failure is not None or getattr(self, "_dispatch_error", None) is not None

    def _coalesce_event_buffer(self, first_chunk: bytes, deadline: float) -> bytes:
        # 7.1.1 holds a read that comes soon after the previous one for up to a millisecond, to
        # gather a burst. A cookie's event is such a read whenever anything else changed just
        # before: its call waited that millisecond (a cookie's round trip went from 26 µs to
        # 1.2 ms; docs/benchmarks.md). Handing each read on at once costs the dispatcher a wake-up
        # per read, and handling a read is a few dictionary updates.
        return first_chunk

    @property
    def alive(self) -> bool:
        return not self.failed and self.is_alive()

    def _check_inotify_fd(self, *args: Any, **kwargs: Any) -> bool:
        timeout_ms = args[0] if args else kwargs.get("timeout_ms")
        if timeout_ms is not None:  # gathering a burst between two reads: not parked
            return bool(super()._check_inotify_fd(*args, **kwargs))
        # If a later watchdog waited elsewhere, `_parked` would stay False and every check would
        # send a cookie: slower, never wrong.
        with self._parked_lock:
            self._parked = True
        try:
            return bool(super()._check_inotify_fd(*args, **kwargs))
        finally:
            with self._parked_lock:
                self._parked = False

    def drained(self) -> bool:
        """Whether every event the kernel queued before this call has been handled."""
        if not self._proves:
            return False
        with self._parked_lock:  # the reader cannot leave its wait, and read, meanwhile
            if not self._parked or (self._chunks is not None and not self._chunks.all_handled()):
                return False
            queued = array.array("i", [0])
            try:
                # The bytes of the events not yet read; the kernel counts them under the lock it
                # takes to queue one, and queues one before the system call that caused it returns.
                fcntl.ioctl(self._inotify_fd, termios.FIONREAD, queued, True)
            except OSError:  # closed: the watcher is stopping
                return False
            return queued[0] == 0


class _CountedQueue:
    """watchdog's reader-to-dispatcher queue (a SimpleQueue), counting the chunks put in and the
    chunks handled. One dispatcher takes the chunks one at a time and handles each before it asks
    for the next, so each `get`/`get_nowait` means every chunk taken before it is handled."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._put = 0
        self._taken = 0
        self._handled = 0

    def put(self, item: bytes, *args: Any, **kwargs: Any) -> None:
        self._put += 1  # only the reader thread puts
        self._queue.put(item, *args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> bytes:
        self._handled = self._taken
        item: bytes = self._queue.get(*args, **kwargs)
        self._taken += 1
        return item

    def get_nowait(self) -> bytes:
        self._handled = self._taken
        item: bytes = self._queue.get_nowait()  # Empty when there is none: nothing more taken
        self._taken += 1
        return item

    def all_handled(self) -> bool:
        # Read by the checking thread while the reader is parked (it puts nothing then); each
        # count is one assignment of an int, whole under the GIL.
        return self._handled == self._put

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)
