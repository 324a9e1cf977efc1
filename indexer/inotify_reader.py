"""watchdog's inotify reader thread, able to tell when nothing can be pending (docs/design.md,
"When no cookie is needed").

`drained()` is true only when the reader thread is parked in its wait for the queue, which it enters
only after handling every event it read before, and the kernel queue holds no byte. Then every event
the kernel queued before the check has been handled, so a change that completed before it is in the
dirty set, as it is once a cookie comes back, without the cookie's file, its event and two thread
hand-offs. Anything else (events queued, a batch being handled, the reader somewhere else) says
False, and the caller sends a cookie.

Imported where a watcher is made: watchdog is not loaded before then.
"""

from __future__ import annotations

import array
import fcntl
import termios
import threading

from watchdog.observers.inotify_c import InotifyFD


class InotifyReader(InotifyFD):
    def __init__(self) -> None:
        super().__init__()
        self._parked_lock = threading.Lock()
        self._parked = False  # in the wait for the queue, every event read before handled

    def _check_inotify_fd(self) -> bool:
        # watchdog's reader loop waits here (poll) before each read, and handles the events of a
        # read before it comes back. If a later watchdog read elsewhere, `_parked` would stay False
        # and every check would send a cookie: slower, never wrong.
        with self._parked_lock:
            self._parked = True
        try:
            return super()._check_inotify_fd()
        finally:
            with self._parked_lock:
                self._parked = False

    def drained(self) -> bool:
        """Whether every event the kernel queued before this call has been handled."""
        with self._parked_lock:  # the reader cannot leave its wait, and read, meanwhile
            if not self._parked:
                return False
            queued = array.array("i", [0])
            try:
                # The bytes of the events not yet read; the kernel counts them under the lock it
                # takes to queue one, and queues one before the system call that caused it returns.
                fcntl.ioctl(self._inotify_fd, termios.FIONREAD, queued, True)
            except OSError:  # closed: the watcher is stopping
                return False
            return queued[0] == 0
