"""Looking at the sessions directory without ever writing to it: listing, stat signatures, reading.

A file's stat signature (inode, size, mtime_ns, ctime_ns) names one state of it. Any write changes
ctime, which userspace cannot set back, so a changed file shows a changed signature, except when the
change lands in the same filesystem-timestamp tick as an earlier one. A signature recorded less than
RACY_WINDOW_NS after the file's ctime is therefore "racy" (git's term): it is re-read, not trusted,
until it has been recorded comfortably after the file last changed.

What is never done to an entry named like a session:

- a symlink is never followed, a FIFO, socket or device is never opened for reading, a directory is
  never entered: the entry is first opened with O_PATH | O_NOFOLLOW, which neither follows the link
  nor opens the object behind it for I/O, and only an object that `fstat` shows to be a regular file
  is then opened for reading, through /proc/self/fd (the very inode that was checked, not the name
  again, so a swap between the check and the open cannot slip a FIFO or device in);
- a file larger than the limit is never opened for reading: its size is checked on that O_PATH
  descriptor first, and a file that grows past the limit while it is read is cut off at the limit.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ccweb_index.indexer.sessionfile import SUFFIX, session_id_from_name, session_ids_among
from ccweb_index.indexer.tuning import RACY_WINDOW_ENV, milliseconds_from_env

log = logging.getLogger("ccweb_index")

# Covers the coarsest timestamp granularity we expect (2 s on FAT/SMB; one clock tick on ext4/tmpfs).
# CCWEB_INDEX_RACY_WINDOW_MS overrides it (tests use a short one; shorter than the filesystem's
# timestamp granularity, a change in the same tick as the last read could go unseen).
RACY_WINDOW_NS = milliseconds_from_env(RACY_WINDOW_ENV, 2_000) * 1_000_000
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


def racy_mark(sig: Signature, looked_at_ns: int) -> int:
    """What the index keeps in `racy`: 0 for a settled state, else when the racy read began.

    Two reads of one racy signature may have seen different contents (two writes in one timestamp
    tick); the later read is the one to keep (docs/design.md, "Equal ctimes").
    """
    return looked_at_ns if is_racy(sig, looked_at_ns) else 0


# --- "we could not read it now" is not "the file is bad" -------------------------------------------

# Read failures that say nothing about the file: the process or the system is short of something
# now (descriptors, memory, kernel buffers), the call was interrupted or would block, or the storage
# (a disk, a network filesystem) failed this once. They are never recorded against the file's
# signature: the file stays due and is read again (docs/reliability.md). Permission denied, a file
# over the size limit, or bytes that do not parse are the file's own state, and are recorded.
TRANSIENT_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN, errno.EINTR, errno.EIO,
     errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE}
)  # fmt: skip


def is_transient(exc: BaseException) -> bool:
    """Whether a failure to read a file is the environment's, not the file's (TRANSIENT_ERRNOS)."""
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS)


# --- entries that are named like sessions but are not regular files ------------------------------


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words."""
    if stat.S_ISLNK(mode):
        return "a symlink (never followed)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (never opened)"
    if stat.S_ISSOCK(mode):
        return "a socket (never opened)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device (never opened)"
    return "not a regular file"


class _IgnoredEntries:
    """Logs each entry named like a session that is not a regular file, once per state of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[int, int]] = {}  # path -> (inode, file type bits)

    def note(self, path: str, ino: int, mode: int) -> None:
        state = (ino, stat.S_IFMT(mode))
        with self._lock:
            if self._seen.get(path) == state:
                return
            self._seen[path] = state
        log.warning("ignoring %s: it is %s, not a regular file", path, kind_of(mode))

    def forget(self, path: str) -> None:
        with self._lock:
            self._seen.pop(path, None)

    def forget_all_but(self, directory: str, keep: set[str]) -> None:
        prefix = os.path.join(directory, "")
        with self._lock:
            for path in [p for p in self._seen if p.startswith(prefix) and p not in keep]:
                del self._seen[path]


_ignored = _IgnoredEntries()


def lstat_session(sessions_dir: str, session_id: str) -> os.stat_result | None:
    """The lstat of `<id>.json` if it is a regular file (not a symlink, FIFO, directory...), else None."""
    path = os.path.join(sessions_dir, session_id + ".json")
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        _ignored.forget(path)
        return None
    if stat.S_ISREG(st.st_mode):
        _ignored.forget(path)
        return st
    _ignored.note(path, st.st_ino, st.st_mode)
    return None


def list_sessions(sessions_dir: str) -> dict[str, int]:
    """Session ids in the directory with their inode numbers, from readdir alone (no stat per file).

    Entries whose type readdir reports as not a regular file (symlinks, directories, FIFOs, sockets,
    devices) are left out, and logged once; the few whose type readdir does not know are settled by
    an lstat. A sessions path that is not a directory raises FileNotFoundError: it holds no sessions.
    """
    return {session_id: entry.inode() for session_id, entry in _session_entries(sessions_dir)}


SweptFile = tuple[str, int, int, int, int]  # (session id, *a Signature's fields), for comparing many cheaply


def sweep_sessions(sessions_dir: str, linked: set[str] | None = None) -> list[SweptFile]:
    """Every session file's id and signature, as (id, ino, size, mtime_ns, ctime_ns): one readdir and
    one lstat per file, and nothing else per file (the check of the whole directory, done often, is
    compared with the index as a set of these tuples: store.out_of_line). `linked`, when given, gets
    the ids of the files with more than one link.

    The names are picked out in one search (sessionfile.session_ids_among), and each lstat is
    relative to the directory's descriptor (fstatat), not a walk of the whole path again
    (docs/benchmarks.md, "The no-op build at 100,000 sessions" and its round three)."""
    swept: list[SweptFile] = []
    ignored: set[str] = set()
    with _listed(sessions_dir) as fd:
        for session_id in session_ids_among(os.listdir(fd)):
            try:
                st = os.lstat(session_id + SUFFIX, dir_fd=fd)
            except FileNotFoundError:  # gone since readdir
                continue
            if stat.S_ISREG(st.st_mode):
                swept.append((session_id, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
                if st.st_nlink > 1 and linked is not None:
                    linked.add(session_id)
            else:
                _note_ignored(sessions_dir, session_id + SUFFIX, st, ignored)
    _ignored.forget_all_but(sessions_dir, ignored)
    return swept


def _note_ignored(sessions_dir: str, name: str, st: os.stat_result, ignored: set[str]) -> None:
    """An entry named like a session that is not a regular file, by its lstat: readdir's inode
    differs on a mount point, and the entry would be logged again by each look that used it."""
    path = os.path.join(sessions_dir, name)
    ignored.add(path)
    _ignored.note(path, st.st_ino, st.st_mode)


@contextlib.contextmanager
def _listed(sessions_dir: str) -> Iterator[int]:
    """A descriptor of the directory, to list it and lstat its entries relative to it. A sessions
    path that is not a directory raises FileNotFoundError: it holds no sessions."""
    try:
        fd = os.open(sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, "not a directory", sessions_dir) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _session_entries(sessions_dir: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(id, entry) of each regular file named like a session, by readdir's file type alone; the
    others are noted in `_ignored`."""
    ignored: set[str] = set()
    with _listed(sessions_dir) as fd, os.scandir(fd) as entries:
        for entry in entries:
            session_id = session_id_from_name(entry.name)
            if session_id is None:
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    yield session_id, entry
                else:
                    _note_ignored(sessions_dir, entry.name, entry.stat(follow_symlinks=False), ignored)
            except FileNotFoundError:  # gone since readdir
                continue
    _ignored.forget_all_but(sessions_dir, ignored)


def ignored_entries(sessions_dir: str) -> list[tuple[str, str]]:
    """(name, what it is) of every entry named like a session that is not a regular file."""
    out: list[tuple[str, str]] = []
    try:
        with os.scandir(sessions_dir) as entries:
            for entry in entries:
                if session_id_from_name(entry.name) is None:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    out.append((entry.name, kind_of(st.st_mode)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(out)


def dir_identity(sessions_dir: str) -> tuple[int, int] | None:
    """(device, inode) of the directory the sessions path leads to now, or None if there is none."""
    try:
        st = os.stat(sessions_dir)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


# --- reading ----------------------------------------------------------------------------------


class NotASession(Exception):
    """The path is no longer a regular file (deleted, or replaced by something else)."""


class TooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"file is {size} bytes, over the {limit}-byte limit (--max-session-bytes)")


_O_PATH = getattr(os, "O_PATH", 0)
_NOATIME = getattr(os, "O_NOATIME", 0)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NOT_A_SESSION = (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO)
# Whether /proc/self/fd can reopen an O_PATH descriptor here; settled on first use.
_proc_reopen: bool | None = None if _O_PATH else False


def _open_for_reading(path: str, flags: int = _READ_FLAGS) -> int:
    # O_NOATIME keeps even the access time of the user's files untouched where we are allowed to.
    if _NOATIME:
        try:
            return os.open(path, flags | _NOATIME)
        except PermissionError:
            pass
    return os.open(path, flags)


def _open_checked(path: str, max_bytes: int) -> tuple[int, os.stat_result]:
    """A descriptor open for reading on `path`, which was a regular file within the limit.

    Raises NotASession (gone, or not a regular file), TooLarge, or OSError (e.g. permission denied).
    """
    global _proc_reopen
    if _proc_reopen is not False:
        try:
            handle = os.open(path, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in _NOT_A_SESSION:
                raise NotASession(path) from None
            raise
        try:
            st = os.fstat(handle)
            if not stat.S_ISREG(st.st_mode):
                raise NotASession(path)
            if st.st_size > max_bytes:
                raise TooLarge(st.st_size, max_bytes)
            try:
                # The magic link leads to the inode just checked (O_NOFOLLOW would refuse it).
                fd = _open_for_reading(f"/proc/self/fd/{handle}", _READ_FLAGS & ~os.O_NOFOLLOW)
            except FileNotFoundError:
                if _proc_reopen:  # /proc worked before: this is something else
                    raise
                _proc_reopen = False  # no /proc here: open by name, below
            else:
                _proc_reopen = True
                return fd, st
        finally:
            os.close(handle)
    # Without O_PATH and /proc: open by name, non-blocking (a FIFO or device swapped in after the
    # lstat that led here is opened, but never read) and check what was opened.
    try:
        fd = _open_for_reading(path)
    except OSError as exc:
        if exc.errno in _NOT_A_SESSION:
            raise NotASession(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotASession(path)
        if st.st_size > max_bytes:
            raise TooLarge(st.st_size, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_session_file(path: str, max_bytes: int = DEFAULT_MAX_SESSION_BYTES) -> tuple[bytes, Signature, int]:
    """Read a session file whole, returning (bytes, signature of what was read, time it was read).

    Never follows a symlink, never opens anything but a regular file for reading, and never reads
    more than `max_bytes` (see the module docstring). If the file changes while it is read, it is
    read again; after a few attempts the last read is returned with its signature marked racy by
    its time, so it is re-read at the next look.
    """
    for attempt in range(_READ_ATTEMPTS):
        looked_at = time.time_ns()
        fd, before = _open_checked(path, max_bytes)
        try:
            data = _read_all(fd, before.st_size, max_bytes)
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


def read_session_ends(path: str, max_bytes: int, size: int) -> tuple[bytes, bytes, Signature, int] | None:
    """A session file's first and last `size` bytes (the same bytes twice in a small file), with the
    signature of the file they were read from and the time they were read; None when the file
    changed while they were read (they may then be two versions' ends)."""
    looked_at = time.time_ns()
    fd, before = _open_checked(path, max_bytes)
    try:
        head = os.pread(fd, size, 0)
        tail = os.pread(fd, size, max(before.st_size - size, 0))
        after = os.fstat(fd)
    finally:
        os.close(fd)
    sig = Signature.of(after)
    return (head, tail, sig, looked_at) if sig == Signature.of(before) else None


def read_session_parts(
    path: str, max_bytes: int, head_bytes: int, locate: Callable[[bytes], int | None]
) -> tuple[bytes, bytes | None, Signature, int]:
    """Read a session file's first `head_bytes`, then everything from the offset `locate(head)`
    names to the end (None, and nothing more read, when it names none or the file is shorter):
    (head, rest, signature, time it was read). What resuming a large file needs, never the bytes in
    between. Checked as `read_session_file` checks a whole read: one descriptor, the signature
    before and after, the end reached; a file still changing is read again, and after a few
    attempts returned stamped racy."""
    for attempt in range(_READ_ATTEMPTS):
        looked_at = time.time_ns()
        fd, before = _open_checked(path, max_bytes)
        try:
            head = _read_head(fd, head_bytes)
            at = locate(head)
            beyond = at is None or at > before.st_size  # nothing to read from there
            rest = None if beyond or at is None else _read_all(fd, before.st_size - at, max_bytes - at, at=at)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        sig = Signature.of(after)
        complete = rest is None or (at or 0) + len(rest) == after.st_size
        if sig == Signature.of(before) and complete:
            return head, rest, sig, looked_at
        if attempt == _READ_ATTEMPTS - 1:
            return head, rest, sig, sig.ctime_ns  # still changing: racy
    raise AssertionError("unreachable")


def _read_all(fd: int, size_hint: int, max_bytes: int, *, at: int | None = None) -> bytes:
    """The file's bytes from the descriptor's position (or from offset `at`, with pread) to its end;
    TooLarge past `max_bytes` of them."""
    chunks = []
    total = 0
    want = max(size_hint, 0) + 1  # one byte more, to see a file that grew since fstat
    while True:
        size = min(max(want, 1 << 16), max_bytes + 1 - total)
        chunk = os.read(fd, size) if at is None else os.pread(fd, size, at + total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise TooLarge(total, max_bytes)  # grew past the limit while being read
        want = 1 << 20
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _read_head(fd: int, size: int) -> bytes:
    """The file's first `size` bytes, or all of it when shorter."""
    chunks = []
    total = 0
    while total < size:
        chunk = os.pread(fd, size - total, total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
