"""Helpers for the hardening tests (issue #5): watching what a process opens, running the server with
fewer privileges or a file-size limit, the CLI, and checking an index against the files.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import cli

IN_ACCESS = 0x001
IN_OPEN = 0x020
IN_ISDIR = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class OpenWatch:
    """Every open and read of an entry of some directories, by any process, from inotify.

    An O_PATH open (which neither reads nor opens the object for I/O) reports nothing; a real open
    reports IN_OPEN, a read IN_ACCESS. This is how the tests prove that a FIFO, a device or a file
    over the size limit is never opened for reading, and that no path outside the sessions
    directory is opened, without strace.
    """

    def __init__(self, *directories: Path) -> None:
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._dirs: dict[int, Path] = {}
        for directory in directories:
            wd = _libc.inotify_add_watch(self._fd, os.fsencode(directory), IN_OPEN | IN_ACCESS)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
            self._dirs[wd] = Path(directory)
        self.events: list[tuple[Path, str, int]] = []

    def poll(self) -> list[tuple[Path, str, int]]:
        while True:
            try:
                buffer = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return self.events
            offset = 0
            while offset < len(buffer):
                wd, mask, _cookie, length = struct.unpack_from("iIII", buffer, offset)
                name = buffer[offset + 16 : offset + 16 + length].rstrip(b"\0").decode(errors="replace")
                self.events.append((self._dirs.get(wd, Path("?")), name, mask))
                offset += 16 + length

    def touched(self, name: str) -> list[str]:
        """What happened to entry `name` (in any watched directory): "open" and/or "read"."""
        out = []
        for _, event_name, mask in self.poll():
            if event_name == name:
                out += (["open"] if mask & IN_OPEN else []) + (["read"] if mask & IN_ACCESS else [])
        return out

    def files_touched(self) -> set[str]:
        """Names of non-directory entries opened or read."""
        return {name for _, name, mask in self.poll() if name and not mask & IN_ISDIR}

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> OpenWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- running the installed command ------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_")}
    env.update(extra)
    return env


def call_json(sessions: Path, db: Path, tool: str, arguments: dict[str, Any], source: str | None = None,
              extra: tuple[str, ...] = ()) -> tuple[dict[str, Any], bool]:  # fmt: skip
    """One `ccweb-index call`, as (payload, is_error)."""
    args = ["call", tool, json.dumps(arguments), "--sessions-dir", str(sessions), "--db", str(db), *extra]
    if source is not None:
        args += ["--source-session", source]
    result = cli(*args)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout), result.returncode == 1


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def unprivileged_prefix() -> tuple[str, ...]:
    """A command prefix under which file permissions apply to the rest.

    Not root: nothing to do. Root: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the capability
    bounding set, then exec: the command runs as root without the power to read a mode-000 file.
    """
    if os.geteuid() != 0:
        return ()
    code = (
        "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for cap in ({_CAP_DAC_OVERRIDE}, {_CAP_DAC_READ_SEARCH}):\n"
        f"    if libc.prctl({_PR_CAPBSET_DROP}, cap, 0, 0, 0) != 0: sys.exit('prctl: %d' % ctypes.get_errno())\n"
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return (sys.executable, "-c", code)


def permissions_apply(probe_dir: Path) -> str | None:
    """None if a mode-000 file cannot be read under unprivileged_prefix(); else why it can."""
    probe = probe_dir / ".probe-noperm"
    probe.write_text("x")
    probe.chmod(0)
    try:
        result = subprocess.run(
            [*unprivileged_prefix(), sys.executable, "-c", f"open({str(probe)!r}).read()"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        probe.unlink()
    if result.returncode != 0 and "PermissionError" in result.stderr:
        return None
    return f"file permissions do not stop this process from reading (exit {result.returncode}: {result.stderr[-200:]})"


def rlimit_prefix(file_size: int) -> tuple[str, ...]:
    """A command prefix that runs the rest with RLIMIT_FSIZE = `file_size` bytes: a write past it fails
    with EFBIG (Python ignores SIGXFSZ), as on a full disk."""
    import resource

    import zygote

    return zygote.rlimit_prefix(RLIMIT_FSIZE=(file_size, resource.RLIM_INFINITY))


def can_mknod_device(directory: Path) -> str | None:
    probe = directory / ".probe-device"
    try:
        os.mknod(probe, 0o666 | 0o020000, os.makedev(1, 3))  # S_IFCHR, like /dev/null
    except OSError as exc:
        return f"cannot create a device node here ({errno.errorcode.get(exc.errno, exc.errno)})"
    probe.unlink()
    return None


class PipeLog:
    """A stderr for a child process that is a pipe, not a file (a file-size limit applies to files),
    collected into `text` by a thread."""

    def __init__(self) -> None:
        import threading

        read_end, write_end = os.pipe()
        self.file = os.fdopen(write_end, "w")
        self._reader = os.fdopen(read_end, "r", errors="replace")
        self._chunks: list[str] = []
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        for line in self._reader:
            self._chunks.append(line)

    @property
    def text(self) -> str:
        return "".join(self._chunks)

    def close(self) -> None:
        self.file.close()
        self._thread.join(10)
        self._reader.close()


# --- the index against the files ----------------------------------------------------------------------

_SESSION_COLUMNS = (
    "id, error IS NOT NULL, good, title, agent, agent_key, status, created_at_ms, updated_at_ms, "
    "created_from_kind, created_from_source, user_input_count"
)


def indexed(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """What the index file answers to `sql`, read past every process's cache."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def index_content(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What an index says about the sessions (not when it looked): sessions rows and user inputs."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sessions = conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY id").fetchall()
        inputs = conn.execute("SELECT * FROM user_inputs ORDER BY session_id, seq").fetchall()
    finally:
        conn.close()
    return sessions, inputs


def assert_consistent(db: Path) -> None:
    """The invariants a crash must not break: a sound database, no half-written session, no orphans."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        orphans = conn.execute(
            "SELECT COUNT(*) FROM user_inputs WHERE session_id NOT IN (SELECT id FROM sessions WHERE good = 1)"
        ).fetchone()[0]
        assert orphans == 0, f"{orphans} user inputs belong to no readable session"
        half = conn.execute(
            """
            SELECT s.id, s.user_input_count, COUNT(u.seq), MIN(u.seq), MAX(u.seq) FROM sessions s
            LEFT JOIN user_inputs u ON u.session_id = s.id WHERE s.good = 1 GROUP BY s.id
            HAVING COUNT(u.seq) != s.user_input_count
                OR (COUNT(u.seq) > 0 AND (MIN(u.seq) != 0 OR MAX(u.seq) != COUNT(u.seq) - 1))
            """
        ).fetchall()
        assert half == [], f"half-written sessions: {half[:5]}"
    finally:
        conn.close()
