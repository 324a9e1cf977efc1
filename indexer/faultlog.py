"""A condition logged once when it begins (WARNING) and once when it ends (INFO), never once per call."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("ccweb_index")


class FaultLog:
    """One condition (e.g. "the index cannot be used"), described by its current message.

    A condition that flaps (a nearly full disk where small writes fit and large ones do not) is not
    logged again within QUIET_SECONDS of the last time its message was logged.
    """

    QUIET_SECONDS = 600.0
    # Messages can vary (they quote errors): the record of when each was logged is kept this small.
    _REMEMBERED = 100

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: tuple[str, bool] | None = None  # (message, logged)
        self._logged_at: dict[str, float] = {}

    def begin(self, message: str) -> None:
        with self._lock:
            if self._active is not None and self._active[0] == message:
                return
            now = time.monotonic()
            loud = now - self._logged_at.get(message, -self.QUIET_SECONDS) >= self.QUIET_SECONDS
            self._active = (message, loud)
            if loud:
                self._logged_at[message] = now
                if len(self._logged_at) > self._REMEMBERED:
                    self._logged_at = {m: t for m, t in self._logged_at.items() if now - t < self.QUIET_SECONDS}
        if loud:
            log.warning("%s", message)

    def end(self, message: str) -> None:
        with self._lock:
            current, self._active = self._active, None
        if current is not None and current[1]:
            log.info("%s", message)

    def active(self) -> str | None:
        with self._lock:
            return None if self._active is None else self._active[0]
