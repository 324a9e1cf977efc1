"""Torn writes: a file caught while its writer is still at it is given a moment to finish.

cc-web (Node's `fs.writeFile`) rewrites a session in place: it truncates the file, then writes it.
A read between the two, or half-way through the write, sees bytes that do not parse. Such a file
keeps its last good version in the index, but that version may be far older than the write that
completed just before (the file may have been rewritten many times since this process last read
it), or the index may never have read it at all (created complete, then caught in its next write
before any look). So a file that had a good version, or that the index has not seen yet, changed
recently (its signature is racy) and now does not parse is read again, a few times, for at most
TORN_WRITE_RETRY_SECONDS, in the hope that the write in flight completes. The budget is per pass
over the files (one call, one watcher batch), not per file, so many broken files cost one bound,
not one each. When it runs out, the last good version stands in, and the unreadable-file log line
says so (docs/reliability.md, "Torn writes").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ccweb_index.indexer.files import is_racy
from ccweb_index.indexer.load import Loaded, Wanted, load_many
from ccweb_index.indexer.sessionfile import Checkpoint

# How long one pass waits in all for writes in flight to complete.
TORN_WRITE_RETRY_SECONDS = 0.05
# The pause between two reads of a file caught mid-write.
TORN_WRITE_PAUSE_SECONDS = 0.005


class TornWrites:
    """One pass's budget for reading again files caught mid-write."""

    def __init__(
        self,
        sessions_dir: str,
        max_bytes: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sessions_dir = sessions_dir
        self.max_bytes = max_bytes
        self._clock = clock
        self._sleep = sleep
        self._deadline: float | None = None  # set by the first file that needs it

    def worth_waiting_for(self, loaded: Loaded, may_have_been_complete: bool) -> bool:
        """A file that may have been complete before (it had a good version, or the index has not
        seen it yet: not one known never to parse), changed recently, and does not parse now (a
        file over the size limit is not being torn: its writer finishing would not make it fit)."""
        return (
            may_have_been_complete
            and loaded.error is not None
            and not loaded.transient
            and loaded.sig.size <= self.max_bytes
            and is_racy(loaded.sig, time.time_ns())
        )

    def settle(self, loaded: Loaded, resume_from: Checkpoint | None = None) -> Loaded | None:
        """Read the file again until it parses or the pass's budget is spent; the last read is
        returned (None: the file is gone). `resume_from`: the indexed version's checkpoint, so that
        a big file that only grew is resumed; one that must be parsed whole goes to a worker, as in
        any load (indexer.load), never holding this process for long."""
        if self._deadline is None:
            self._deadline = self._clock() + TORN_WRITE_RETRY_SECONDS
        again = Wanted(loaded.session_id, max(loaded.size, loaded.sig.size), resume_from)
        current: Loaded | None = loaded
        while (
            current is not None
            and current.error is not None
            and not current.transient
            and self._clock() < self._deadline
        ):
            self._sleep(min(TORN_WRITE_PAUSE_SECONDS, max(self._deadline - self._clock(), 0.0)))
            [(_, current)] = load_many(self.sessions_dir, [again], self.max_bytes)
        return current
