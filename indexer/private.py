"""Keeping the index private, and out of the sessions directory.

The index holds copies of the user's messages, so its files get the protection cc-web gives the
session files: the directories this code creates are 0700 and the index files 0600, whatever the
umask. SQLite creates the `-wal` and `-shm` files itself, giving them the mode of the database file
(it fchmods them, ignoring the umask), so the database file is made 0600 before SQLite first opens
it. Existing index files that others can read are tightened; a directory the user chose (the parent
of `--db`) is never chmodded, only warned about (see docs/decisions.md, "Private index files").

The sessions directory is only ever read: an index path that resolves inside it is refused.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from ccweb_index.indexer.errors import IndexInsideSessions, IndexMismatch, IndexUnavailable

log = logging.getLogger("ccweb_index")

PRIVATE_UMASK = 0o077
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
OTHERS = 0o077  # the group and world permission bits
INDEX_SUFFIXES = ("", "-wal", "-shm", ".lock")  # the database and the files beside it

# The umask belongs to the process: one lock so that two threads cannot interleave their
# save/restore and leave the process with the wrong umask.
_umask_lock = threading.RLock()
_warned: set[str] = set()  # a problem that cannot be fixed is logged once per process


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files and directories created inside are readable by their owner only."""
    with _umask_lock:
        old = os.umask(PRIVATE_UMASK)
        try:
            yield
        finally:
            os.umask(old)


def make_private_dir(directory: Path, *, ours: bool) -> tuple[int, int] | None:
    """Create `directory` (and missing parents) 0700; returns its identity (device, inode) when this
    call made it, else None. `ours`: the directory is this program's own (the cache directory), so
    an existing one that others can enter is tightened; otherwise the user chose it and gets a
    warning instead."""
    with private_umask():
        directory.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
            made = True
        except FileExistsError:
            made = False
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):  # a file by that name: said as such, not as a directory's mode
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    if st.st_mode & OTHERS:
        if ours and _owned(st):
            os.chmod(directory, stat.S_IMODE(st.st_mode) & ~OTHERS)
            log.warning("the index directory %s was open to other users (mode %s); made it %s",
                        directory, _octal(st.st_mode), _octal(st.st_mode & ~OTHERS))  # fmt: skip
        else:
            _warn_dir(directory, st)
    return (st.st_dev, st.st_ino) if made else None


def open_private(path: str, *, lock: bool = False) -> int:
    """Open `path` for reading and writing, creating it 0600; an existing one is tightened first.
    What is opened is checked as it is now, whatever was checked before (`refuse_unless_own`).
    `lock`: the `.lock`, which is never followed through a symlink, and is checked for other names."""
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_NOFOLLOW if lock else 0)
    created = True
    with private_umask():
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        except FileExistsError:  # or a symlink, which O_EXCL never follows: the database's is
            fd, created = os.open(path, flags | (0 if lock else os.O_CREAT), PRIVATE_FILE_MODE), False
    try:
        if not created:  # what this process made is its own, whatever owner the filesystem reports
            refuse_unless_own(path, os.fstat(fd), lock=lock)
        _tighten_fd(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def index_files(path: Path) -> list[str]:
    """The names of the index's files: the database and its journals where SQLite keeps them,
    beside the file the path leads to (it follows a symlink), and the `.lock` beside the path."""
    real = os.path.realpath(path)
    return [real, *(f"{real}{suffix}" for suffix in ("-wal", "-shm", "-journal")), f"{path}.lock"]


def refuse_others_files(path: Path) -> os.stat_result | None:
    """The database's status (None: there is none yet). Raises IndexMismatch when a file the index
    at `path` would use exists and cannot be one of its files (`not_own_file`).

    The index holds the user's words, so in a directory others decide about (one others can write,
    a shared /tmp, a group's project directory; or another user's own) it goes only into files only
    the user decides about: another user could otherwise pre-create one of these names, as a file of
    theirs to read the words from or to forge them in, or as a symlink or a hard link to a file of
    the user's, which opening the index would truncate and chmod (found by an independent test: a
    session file, through the `.lock`). In a directory of the user's or root's that only its owner
    can write, what is there was put there by the user or by root, and a file reported as another
    user's is taken as it comes (a network filesystem may report every file as `nobody`)."""
    found = {}
    for name in index_files(path):
        try:
            found[name] = st = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise IndexUnavailable(f"cannot look at {name}: {exc.strerror or exc}") from None
        refuse_unless_own(name, st, lock=name.endswith(".lock"))
    return found.get(os.path.realpath(path))


def open_files() -> dict[str, tuple[int, int]] | None:
    """This process's open descriptors, each with the identity (device, inode) of what it holds
    (None: Linux's /proc/self/fd is not there)."""
    try:
        descriptors = os.listdir(_OPEN_FILES)
    except OSError:
        return None
    held = {}
    for fd in descriptors:
        with contextlib.suppress(OSError):  # closed meanwhile (another thread's file)
            st = os.stat(os.path.join(_OPEN_FILES, fd))
            held[fd] = (st.st_dev, st.st_ino)
    return held


def refuse_others_open_files(path: Path, before: dict[str, tuple[int, int]] | None) -> None:
    """Raise IndexMismatch when a file opened since `before` (`open_files()` just before SQLite
    opened the index at `path`), on the index directory's filesystem, cannot be one of its files
    (`not_own_file`, judged as a file of that directory), whatever its name is now.

    The names were judged just before SQLite opened them by name, but in a directory others decide
    about, another user can put a file of theirs at a name in between, timing it by watching the
    directory with inotify: an independent test won 4 of 4 against a running server it made replace
    its index (by deleting the `-wal`), and the words went into its file. Judging the descriptors
    SQLite holds by their names was not enough: the next test renamed its file away as soon as SQLite
    had opened it (10 of 10 servers, and a forged input checkpointed into the user's database). So
    every file this process opened meanwhile is judged (another thread's session file included).
    Asked once SQLite has opened them all (after its first read), before any of the user's words is
    written. Linux only (/proc/self/fd); elsewhere the names' check stands alone."""
    if before is None:
        return
    directory = os.path.dirname(os.path.realpath(path))
    if not others_decide(directory):
        return
    device = os.stat(directory).st_dev
    for fd, identity in (open_files() or {}).items():
        if before.get(fd) == identity or identity[0] != device:
            continue
        held = os.path.join(_OPEN_FILES, fd)
        try:
            st, name = os.stat(held), os.readlink(held).removesuffix(" (deleted)")
        except OSError:  # closed meanwhile
            continue
        if stat.S_ISREG(st.st_mode):
            problem = _not_the_users(os.path.join(directory, "index"), st)
            if problem is not None:
                raise not_for_the_index(f"{name}, which SQLite opened for the index,", problem)


# Where Linux shows this process's open files, each as a link named by its descriptor.
_OPEN_FILES = "/proc/self/fd"


def refuse_unless_own(name: str, st: os.stat_result, *, lock: bool = False) -> None:
    """Raise IndexMismatch when the file `name`, with this status, cannot be one of the index's files."""
    problem = not_own_file(name, st, lock=lock)
    if problem is not None:
        raise not_for_the_index(name, problem)


def not_for_the_index(name: str, problem: str) -> IndexMismatch:
    return IndexMismatch(f"{name} {problem}, so the index will not use it and leaves it as it is; "
                         "pass a --db in a directory of your own")  # fmt: skip


def not_own_file(name: str, st: os.stat_result, *, lock: bool = False) -> str | None:
    """Why the file `name`, with this status, cannot be one of the index's files (None: it can). In a
    directory others decide about, only the user's own file, and a `.lock` with one name, is trusted."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return _not_the_users(name, st, lock=lock)


def refuse_others_link(path: Path) -> None:
    """Raise IndexMismatch when `path` is a symlink another user put where others decide: the index
    would go wherever they chose, a file of theirs among the places (found by an independent review:
    a link in a group's directory into its maker's own, where their files were taken as they came)."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # nothing to follow: what is at the path is judged when the index is opened
    problem = _not_the_users(str(path), st)
    if problem is not None:
        raise not_for_the_index(str(path), f"is a symbolic link that {problem}")


def _not_the_users(name: str, st: os.stat_result, *, lock: bool = False) -> str | None:
    directory = os.path.dirname(os.path.abspath(name))
    if not others_decide(directory):
        return None
    if not _owned(st) and st.st_uid != _uid_of_new_files(directory):
        return f"belongs to another user (uid {st.st_uid}), in a directory others decide about"
    if lock and st.st_nlink > 1:
        return "has other names (hard links), in a directory others decide about"
    return None


def _uid_of_new_files(directory: str) -> int | None:
    """The owner the filesystem reports for a file this process makes in `directory` (None: none
    can be made): not always this process's uid. NFS with root_squash, or with id maps that do not
    match, reports `nobody`; CIFS mounted without uid=, the mount's. Asked only of a file that shows
    another owner, by making one and removing it at once."""
    probe = os.path.join(directory, f".ccweb-index-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_uid
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)


def others_decide(directory: str) -> bool:
    """Whether users other than this one and root can make or replace files in `directory`: others
    may write it (an ACL granting it shows in the group bits), or it is another user's, who can.
    A directory reached through a symlink is the one it leads to: a link planted in a shared
    directory, into a directory of its maker's, was otherwise taken as a place only its owner
    writes (found by an independent review)."""
    try:
        st = os.stat(directory)
    except OSError:
        return True  # not known: as the worst case
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or st.st_uid not in (os.geteuid(), 0)


def prepare_database(path: Path) -> None:
    """Before SQLite opens `path`: the database exists and is 0600 (so the `-wal` and `-shm` SQLite
    creates are too), and any `-wal` / `-shm` left by an earlier run is tightened, and made
    writable by its owner again: SQLite gives them the database's mode, so a run against a
    read-only database leaves them read-only, and once the database is writable again a read-only
    `-shm` made every write fail ("attempt to write a readonly database") for good."""
    os.close(open_private(str(path)))
    real = os.path.realpath(path)
    for suffix in ("-wal", "-shm"):
        # Judged again here, the moment before SQLite opens them: one another user made since the
        # first look was only warned about, and received the user's words (an independent review).
        with contextlib.suppress(FileNotFoundError):
            refuse_unless_own(f"{real}{suffix}", os.lstat(f"{real}{suffix}"))
        tighten(f"{real}{suffix}", writable=True)


def tighten(path: str, *, writable: bool = False) -> None:
    """Remove the group and world bits of an existing index file (nothing if it does not exist);
    `writable`: and give its owner read and write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return  # absent, or not ours to open: reported by `modes`, and SQLite will fail clearly
    try:
        _tighten_fd(fd, path, writable=writable)
    finally:
        os.close(fd)


def _tighten_fd(fd: int, path: str, *, writable: bool = False) -> None:
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    wanted = (mode & ~OTHERS) | (PRIVATE_FILE_MODE if writable else 0)
    if wanted == mode:
        return
    if _owned(st):
        os.fchmod(fd, wanted)
        if mode & OTHERS:
            log.info("the index file %s was readable by other users (mode %s); made it private", path, _octal(mode))
        return
    if mode & OTHERS:
        _warn_once(path, f"the index file {path} is open to other users (mode {_octal(mode)}); {fix(path, st)}")


def _warn_dir(directory: Path, st: os.stat_result) -> None:
    _warn_once(str(directory), f"the index directory {directory} is open to other users (mode "
                               f"{_octal(st.st_mode)}): they can see the index files' names, sizes and "
                               f"times, so when you are active; {fix(str(directory), st)}")  # fmt: skip


def fix(name: str, st: os.stat_result) -> str:
    """What the user should do about `name` being open to other users."""
    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:  # shared, like /tmp: chmod is not the fix
        return "use a --db in a directory of your own (e.g. the default, in your cache directory)"
    return f"run `chmod go-rwx {name}`" + ("" if _owned(st) else f" as its owner (uid {st.st_uid})")


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("%s", message)


def _owned(st: os.stat_result) -> bool:
    # root may chmod anything, but a file of another user is theirs to decide about
    return st.st_uid == os.geteuid()


def _octal(mode: int) -> str:
    return f"{stat.S_IMODE(mode):04o}"


def modes(path: Path) -> list[tuple[str, str, str | None]]:
    """The index directory and files that exist: each with its mode, and what to do if others can use it."""
    found = []
    real_parent = os.path.dirname(os.path.realpath(path))
    parents = [str(path.parent)] + ([real_parent] if real_parent != os.path.realpath(path.parent) else [])
    for name in (*parents, *[name for name in index_files(path) if not name.endswith("-journal")]):
        try:
            st = os.stat(name)
        except OSError:
            continue
        found.append((name, _octal(st.st_mode), fix(name, st) if st.st_mode & OTHERS else None))
    return found


# --- the sessions directory is only ever read ---------------------------------------------------


def refuse_inside_sessions(db: str | os.PathLike[str], sessions_dir: str | os.PathLike[str]) -> None:
    """Raise IndexInsideSessions when `db` resolves inside the sessions directory (`inside_sessions`),
    or when one of the index files is a hard link to a file in it (tightening its mode, or SQLite
    writing it, would then change that file)."""
    real_sessions = os.path.realpath(sessions_dir)
    where = inside_sessions(db, sessions_dir)
    if where is not None:
        raise IndexInsideSessions(
            f"the index {where} is inside the sessions directory {_resolved(sessions_dir, real_sessions)}, "
            "which is only ever read; choose an index path outside it"
        )
    linked = _linked_into(db, real_sessions)
    if linked is not None:
        raise IndexInsideSessions(
            f"the index file {linked[0]} is a hard link to {linked[1]} in the sessions directory, which is "
            "only ever read; remove that link, or choose another index path"
        )


def inside_sessions(path: str | os.PathLike[str], sessions_dir: str | os.PathLike[str]) -> str | None:
    """`path` as it resolves (through symlinks, also of a parent of a file that does not exist yet,
    and bind mounts) when that is the sessions directory or anywhere under it; else None."""
    real = os.path.realpath(path)
    real_sessions = os.path.realpath(sessions_dir)
    inside = os.path.commonpath([real, real_sessions]) == real_sessions
    if not inside:
        inside = _under_same_directory(real, real_sessions)
    return _resolved(path, real) if inside else None


def _linked_into(db: str | os.PathLike[str], real_sessions: str) -> tuple[str, str] | None:
    """(an index file, the file in the sessions directory it is a hard link to), if there is one.
    The directory is listed only when an index file has more than one link, which SQLite never makes."""
    linked = {}
    for name in (f"{os.fspath(db)}{suffix}" for suffix in INDEX_SUFFIXES):
        with contextlib.suppress(OSError):
            st = os.lstat(name)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                linked[(st.st_dev, st.st_ino)] = name
    if not linked:
        return None
    with contextlib.suppress(OSError), os.scandir(real_sessions) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) in linked:
                    return linked[(st.st_dev, st.st_ino)], entry.path
    return None


def _resolved(given: str | os.PathLike[str], real: str) -> str:
    return str(given) if os.path.abspath(given) == real else f"{given} (resolving to {real})"


def _under_same_directory(real_db: str, real_sessions: str) -> bool:
    # The same directory can have two paths (a bind mount): compare identities up the tree.
    try:
        target = os.stat(real_sessions)
    except OSError:
        return False
    current = real_db
    while True:
        with contextlib.suppress(OSError):
            st = os.stat(current)
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent
