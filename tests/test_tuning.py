"""The timing settings read from the environment (CCWEB_INDEX_BUSY_TIMEOUT_MS, CCWEB_INDEX_RACY_WINDOW_MS,
CCWEB_INDEX_WAIT_POLL_MS, CCWEB_INDEX_WAIT_PROGRESS_MS)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from ccweb_index.indexer.tuning import (
    BUSY_TIMEOUT_ENV,
    RACY_WINDOW_ENV,
    WAIT_POLL_ENV,
    WAIT_PROGRESS_ENV,
    milliseconds_from_env,
)

# What a fresh process makes of the variables: the constants, and the busy timeout a connection gets.
_PROBE = """
import sys
from pathlib import Path
from ccweb_index.indexer import db, files
from ccweb_index.server import waits
conn = db.connect(Path(sys.argv[1]))
print(db.BUSY_TIMEOUT_MS, conn.execute("PRAGMA busy_timeout").fetchone()[0], files.RACY_WINDOW_NS,
      round(waits.POLL_SECONDS * 1000), round(waits.PROGRESS_SECONDS * 1000))
"""


def probe(tmp_path: Path, **env: str) -> tuple[list[int], str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "probe.sqlite")],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [int(n) for n in result.stdout.split()], result.stderr


def test_a_process_takes_its_waits_from_the_environment(tmp_path: Path) -> None:
    values, stderr = probe(tmp_path, **{BUSY_TIMEOUT_ENV: "150", RACY_WINDOW_ENV: "40", WAIT_POLL_ENV: "30", WAIT_PROGRESS_ENV: "700"})
    assert values == [150, 150, 40_000_000, 30, 700] and stderr == ""


def test_without_the_variables_the_defaults_stand(tmp_path: Path) -> None:
    values, stderr = probe(tmp_path)
    assert values == [5_000, 5_000, 2_000_000_000, 1_000, 10_000] and stderr == ""


def test_a_wait_interval_of_0_would_be_a_busy_loop_and_is_refused(tmp_path: Path) -> None:
    values, stderr = probe(tmp_path, **{WAIT_PROGRESS_ENV: "0"})
    assert values[4] == 10_000
    assert stderr.strip() == f"{WAIT_PROGRESS_ENV}='0' is not a whole number of milliseconds from 1 to 3600000; using 10000"


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5", "3600001", "0x10"])
def test_a_bad_value_is_refused_with_a_warning_and_the_default_stands(
    raw: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, raw)
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    assert milliseconds_from_env(BUSY_TIMEOUT_ENV, 5_000) == 5_000
    assert [r.getMessage() for r in caplog.records] == [
        f"{BUSY_TIMEOUT_ENV}={raw!r} is not a whole number of milliseconds from 0 to 3600000; using 5000"
    ]


@pytest.mark.parametrize(("raw", "expected"), [("", 7), ("  ", 7), ("0", 0), (" 250 ", 250), ("3600000", 3_600_000)])
def test_good_and_empty_values(raw: str, expected: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RACY_WINDOW_ENV, raw)
    assert milliseconds_from_env(RACY_WINDOW_ENV, 7) == expected


def test_a_bad_value_at_start_up_is_one_warning_line_not_a_traceback(tmp_path: Path) -> None:
    values, stderr = probe(tmp_path, **{RACY_WINDOW_ENV: "soon"})
    assert values[2] == 2_000_000_000
    assert stderr.strip() == f"{RACY_WINDOW_ENV}='soon' is not a whole number of milliseconds from 0 to 3600000; using 2000"
