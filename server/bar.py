"""`build`'s progress bar on a terminal: click's bar, with files, MB, rate and time left beside it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TextIO

import click

from ccweb_index.indexer.progress import Tally

# A pass advances once per file, up to tens of thousands a second; the terminal needs far fewer.
BAR_REFRESH_SECONDS = 0.1


class BarProgress(Tally):
    """A `Progress` drawn as click's progress bar, over the bytes to read (what the time tracks)."""

    def __init__(self, file: TextIO, label: str = "indexing", clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._file = file
        self._label = label
        self._stack = contextlib.ExitStack()
        self._bar: Any = None
        self._drawn_at = 0.0

    def start(self, files: int, size: int) -> None:
        super().start(files, size)
        if self._bar is None and files:
            # Our own text beside the bar, so click's ETA (by steps) and position are off.
            bar = click.progressbar(
                length=1, label=self._label, file=self._file, show_eta=False, show_percent=True,
                item_show_func=lambda text: text,
            )  # fmt: skip
            # Its end is registered before it draws: a SIGTERM raised as the first draw returns
            # (build's handler) must still find it, or the cursor it hid stays hidden.
            self._stack.push(bar)
            self._bar = bar.__enter__()
        self._draw()

    def advance(self, files: int, size: int) -> None:
        super().advance(files, size)
        if self._clock() - self._drawn_at >= BAR_REFRESH_SECONDS:
            self._draw()

    def done(self) -> None:
        self._draw()
        super().done()
        self.close()

    def failed(self) -> None:
        super().failed()
        self.close()

    def close(self) -> None:
        """End the bar's line (also when the pass failed or was interrupted)."""
        self._stack.close()
        self._bar = None

    def __enter__(self) -> BarProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _draw(self) -> None:
        snapshot = self.snapshot()
        if self._bar is None or snapshot is None:
            return
        self._drawn_at = self._clock()
        done, total = snapshot.size, snapshot.size_total
        if not total:  # every file is empty: by files
            done, total = snapshot.files, snapshot.files_total
        self._bar.length = max(total, 1)
        self._bar.pos = done if total else 1
        self._bar.current_item = snapshot.describe()
        self._bar.render_progress()
