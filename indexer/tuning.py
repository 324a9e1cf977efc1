"""Timing settings that may be changed through the environment (README, "Environment").

They exist so that tests can run servers with short waits, and for unusual filesystems; the defaults
suit everyone else. A value that is not a whole number in range is not used: the default stands, and
a warning says so on stderr (a mistyped tuning variable should not stop a server that cc-web starts).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("ccweb_index")

BUSY_TIMEOUT_ENV = "CCWEB_INDEX_BUSY_TIMEOUT_MS"
RACY_WINDOW_ENV = "CCWEB_INDEX_RACY_WINDOW_MS"
WAIT_POLL_ENV = "CCWEB_INDEX_WAIT_POLL_MS"
WAIT_PROGRESS_ENV = "CCWEB_INDEX_WAIT_PROGRESS_MS"
TIMING_SETTINGS = (BUSY_TIMEOUT_ENV, RACY_WINDOW_ENV, WAIT_POLL_ENV, WAIT_PROGRESS_ENV)
_MAX_MS = 3_600_000  # an hour: anything longer is surely a mistake


def milliseconds_from_env(name: str, default: int, minimum: int = 0) -> int:
    """The whole number of milliseconds in environment variable `name`, else `default`. `minimum`: for
    an interval that something repeats at, where 0 would be a busy loop."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if minimum <= value <= _MAX_MS:
        return value
    log.warning(
        "%s=%r is not a whole number of milliseconds from %d to %d; using %d", name, raw, minimum, _MAX_MS, default
    )
    return default
