"""How far an indexing pass has got, for people: log lines, a bar (server/bar.py), /healthz.

A full pass (`Indexer.reconcile`) reports to a `Progress`: `start` once it knows the files it will
read and their size, `advance` as each one is read, `done` at its end, or `failed` when it ends
without finishing (the disk full, the index locked). `start` adds to what the pass has to do: a
pass may find more to read on its way (files it reads again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("ccweb_index")

# How often a pass logs a line while it runs (the first pass of `serve` and `watch`, and `build`
# without a terminal, whose --progress-seconds overrides it).
PROGRESS_LOG_SECONDS = 5.0


class Progress(Protocol):
    def start(self, files: int, size: int) -> None: ...

    def advance(self, files: int, size: int) -> None: ...

    def done(self) -> None: ...

    def failed(self) -> None: ...


class NoProgress:
    """Reports to nobody."""

    def start(self, files: int, size: int) -> None:
        pass

    def advance(self, files: int, size: int) -> None:
        pass

    def done(self) -> None:
        pass

    def failed(self) -> None:
        pass


NO_PROGRESS = NoProgress()


@dataclass(frozen=True, slots=True)
class Snapshot:
    files: int
    files_total: int
    size: int  # bytes of the files read so far
    size_total: int
    seconds: float  # since the pass started

    @property
    def rate(self) -> float:
        """Bytes per second so far (0 until something was read)."""
        return self.size / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far; None until there is a rate. By bytes: parsing costs
        by the byte, and session sizes vary a thousandfold. By files when they are all empty."""
        done, total = (self.size, self.size_total) if self.size_total else (self.files, self.files_total)
        if done <= 0 or self.seconds <= 0:
            return None
        return max(total - done, 0) * self.seconds / done

    def as_dict(self) -> dict[str, Any]:
        eta = self.eta
        return {
            "filesDone": self.files,
            "filesTotal": self.files_total,
            "bytesDone": self.size,
            "bytesTotal": self.size_total,
            "elapsedSeconds": round(self.seconds, 3),
            "bytesPerSecond": round(self.rate),
            "etaSeconds": None if eta is None else round(eta, 1),
        }

    def describe(self) -> str:
        """E.g. `1,234/10,000 files, 512.3/1,916.0 MB, 85.3 MB/s, about 16 s left`."""
        text = f"{self.files:,}/{self.files_total:,} files, {self.size / 1e6:,.1f}/{self.size_total / 1e6:,.1f} MB"
        if self.rate > 0:
            text += f", {self.rate / 1e6:,.1f} MB/s"
        eta = self.eta
        if eta is not None and self.files < self.files_total:
            text += f", about {duration(eta)} left"
        return text


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Tally:
    """The counts of a pass, thread-safe: the pass advances them while /healthz reads them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running = False
        self._counts = [0, 0, 0, 0]  # files, files_total, size, size_total
        self._started = 0.0

    def start(self, files: int, size: int) -> None:
        with self._lock:
            if not self._running:
                self._running, self._counts, self._started = True, [0, 0, 0, 0], self._clock()
            self._counts[1] += files
            self._counts[3] += size

    def advance(self, files: int, size: int) -> None:
        with self._lock:
            self._counts[0] += files
            self._counts[2] += size

    def done(self) -> None:
        with self._lock:
            self._running = False

    def failed(self) -> None:
        """The pass ended unfinished: the next one counts from nothing, not on top of it."""
        Tally.done(self)  # the counts' end only, whatever a subclass's `done` also does

    def snapshot(self) -> Snapshot | None:
        """The pass so far; None when none is running."""
        with self._lock:
            if not self._running:
                return None
            files, files_total, size, size_total = self._counts
            return Snapshot(files, files_total, size, size_total, self._clock() - self._started)


class LoggedProgress(Tally):
    """Logs a pass at INFO: a line every `every` seconds while it runs and, with announce=True, one
    when it starts with files to read and one at its end (`build` prints its own summary instead).
    With once=True only the first pass is reported (the first indexing pass of `serve` and
    `watch`; later passes are the watcher's business)."""

    def __init__(
        self,
        what: str,
        *,
        every: float | None = None,
        once: bool = False,
        announce: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(clock)
        self.what = what
        self.every = PROGRESS_LOG_SECONDS if every is None else every
        self.once = once
        self.announce = announce
        self._finished = False  # once=True: the first pass is over
        self._logged_at: float | None = None  # when the last line was due; None: no pass running
        self._announced = False

    def start(self, files: int, size: int) -> None:
        if self._finished:
            return
        first = self.snapshot() is None
        super().start(files, size)
        if first:
            self._logged_at = self._clock()
            if self.announce and files:
                self._announced = True
                log.info("%s: %s files to read (%.1f MB)", self.what, f"{files:,}", size / 1e6)

    def advance(self, files: int, size: int) -> None:
        if self._finished:
            return
        super().advance(files, size)
        if self._logged_at is not None and self._clock() - self._logged_at >= self.every:
            snapshot = self.snapshot()
            if snapshot is not None:
                self._logged_at = self._clock()
                log.info("%s: %s", self.what, snapshot.describe())

    def done(self) -> None:
        if self._finished:
            return
        snapshot = self.snapshot()
        super().done()
        self._finished = self.once
        if snapshot is not None and self._announced:
            log.info(
                "%s: done, %s files (%.1f MB) read in %s",
                self.what, f"{snapshot.files:,}", snapshot.size / 1e6, duration(snapshot.seconds),
            )  # fmt: skip
        self._logged_at, self._announced = None, False

    def failed(self) -> None:
        # No "done" line, and with once=True the pass that runs again is still the first.
        super().failed()
        self._logged_at, self._announced = None, False
