"""Looking at the sessions directory without ever writing to it: listing, stat signatures, reading.

A file's stat signature (inode, size, mtime_ns, ctime_ns) names one state of it. Any write changes
ctime, which userspace cannot set back, so a changed file shows a changed signature, except when the
change lands in the same filesystem-timestamp tick as an earlier one. A signature recorded less than
RACY_WINDOW_NS after the file's ctime is therefore "racy" (git's term): it is re-read, not trusted,
until it has been recorded comfortably after the file last changed.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass

from indexer.sessionfile import session_id_from_name

# Covers the coarsest timestamp granularity we expect (2 s on FAT/SMB; one clock tick on ext4/tmpfs).
RACY_WINDOW_NS = 2_000_000_000
DEFAULT_MAX_SESSION_BYTES = 256 * 1024 * 1024
_READ_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Signature:
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Signature:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def is_racy(sig: Signature, looked_at_ns: int) -> bool:
    """Whether a later change could leave `sig` unchanged (see the module docstring)."""
    return sig.ctime_ns >= looked_at_ns - RACY_WINDOW_NS


def lstat_session(sessions_dir: str, session_id: str) -> os.stat_result | None:
    """The lstat of `<id>.json` if it is a regular file (not a symlink, FIFO, directory...), else None."""
    try:
        st = os.lstat(os.path.join(sessions_dir, session_id + ".json"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def list_sessions(sessions_dir: str) -> dict[str, int]:
    """Session ids in the directory with their inode numbers, from readdir alone (no stat per file).

    Entries whose type readdir reports as not a regular file are left out; the few whose type is
    unknown are kept and settled by the lstat that precedes any read.
    """
    found: dict[str, int] = {}
    with os.scandir(sessions_dir) as entries:
        for entry in entries:
            session_id = session_id_from_name(entry.name)
            if session_id is None:
                continue
            try:
                if entry.is_symlink() or (entry.is_dir(follow_symlinks=False)):
                    continue
            except OSError:
                continue
            found[session_id] = entry.inode()
    return found


def dir_signature(sessions_dir: str) -> Signature:
    return Signature.of(os.stat(sessions_dir))


class NotASession(Exception):
    """The path is no longer a regular file (deleted, or replaced by something else)."""


class TooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"file is {size} bytes, over the {limit}-byte limit (--max-session-bytes)")


_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NOATIME = getattr(os, "O_NOATIME", 0)


def _open_readonly(path: str) -> int:
    # O_NOATIME keeps even the access time of the user's files untouched where we are allowed to.
    if _NOATIME:
        try:
            return os.open(path, _FLAGS | _NOATIME)
        except PermissionError:
            pass
    return os.open(path, _FLAGS)


def read_session_file(path: str, max_bytes: int = DEFAULT_MAX_SESSION_BYTES) -> tuple[bytes, Signature, int]:
    """Read a session file whole, returning (bytes, signature of what was read, time it was read).

    Never follows a symlink and never blocks on a FIFO or device. If the file changes while it is
    read, it is read again; after a few attempts the last read is returned with its signature marked
    racy by its time, so it is re-read at the next look.
    """
    for attempt in range(_READ_ATTEMPTS):
        looked_at = time.time_ns()
        try:
            fd = _open_readonly(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
                raise NotASession(path) from None
            raise
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise NotASession(path)
            if before.st_size > max_bytes:
                raise TooLarge(before.st_size, max_bytes)
            data = _read_all(fd, before.st_size)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        sig = Signature.of(after)
        if sig == Signature.of(before) and len(data) == after.st_size:
            return data, sig, looked_at
        if attempt == _READ_ATTEMPTS - 1:
            # Still changing: keep what we read, stamped so that it is seen as racy.
            return data, sig, sig.ctime_ns
    raise AssertionError("unreachable")


def _read_all(fd: int, size_hint: int) -> bytes:
    chunks = []
    want = max(size_hint, 0) + 1  # one byte more, to see a file that grew since fstat
    while True:
        chunk = os.read(fd, max(want, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        want = 1 << 20
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]
