"""Issue #11, the local part: the index is private whatever the umask, checked as another user too,
and never lands inside the sessions directory."""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ccweb_index.indexer.db import LOCK_SIGNATURE, open_handle, open_index
from ccweb_index.indexer.errors import IndexMismatch
from ccweb_index.indexer.private import INDEX_SUFFIXES
from ccweb_index.server.cli import main
from ccweb_index.server.service import Service

from conftest import Corpus, session, snapshot


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def index_files(db: Path) -> list[str]:
    return [f"{db}{suffix}" for suffix in INDEX_SUFFIXES]


@pytest.fixture
def umask() -> Iterator[object]:
    """Set the process umask for one test (it is process-wide), restoring it afterwards."""
    saved = os.umask(0o022)
    os.umask(saved)
    try:
        yield os.umask
    finally:
        os.umask(saved)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user cache directory (platformdirs follows XDG_CACHE_HOME): where the default index goes."""
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "ccweb-index"


def cli(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


# --- modes whatever the umask --------------------------------------------------------------------


@pytest.mark.parametrize("value", [0o000, 0o022])
def test_a_new_index_and_the_files_sqlite_makes_are_private(corpus: Corpus, db_path: Path, umask, value: int) -> None:
    corpus.write("a", session("secret"))
    umask(value)
    index = open_handle(db_path, str(corpus.path))
    try:
        # The migrations wrote through the WAL: SQLite created -wal and -shm itself, while open.
        assert all(os.path.exists(name) for name in index_files(db_path))
        assert mode(db_path.parent) == 0o700
        assert {name: mode(name) for name in index_files(db_path)} == dict.fromkeys(index_files(db_path), 0o600)
    finally:
        index.close()
    assert os.umask(value) == value, "the umask is given back"


@pytest.mark.parametrize("value", [0o000, 0o022])
def test_the_default_cache_directory_is_created_private(corpus: Corpus, cache: Path, umask, value: int) -> None:
    corpus.write("a", session("secret"))
    umask(value)
    result = cli("build", "--sessions-dir", str(corpus.path))
    assert result.exit_code == 0, result.output
    (db,) = cache.glob("*.sqlite")
    assert mode(cache) == 0o700
    assert mode(cache.parent) == 0o700, "a cache root we had to create is private too"
    assert mode(db) == 0o600 and mode(f"{db}.lock") == 0o600


def test_an_existing_index_open_to_others_is_tightened(corpus: Corpus, cache: Path) -> None:
    corpus.write("a", session("secret"))
    assert cli("build", "--sessions-dir", str(corpus.path)).exit_code == 0
    (db,) = cache.glob("*.sqlite")
    Path(f"{db}-wal").write_bytes(b"")  # as a crashed process of an older version would leave it
    for name in (db, f"{db}.lock", f"{db}-wal"):
        os.chmod(name, 0o644)
    os.chmod(cache, 0o755)

    result = cli("status", "--sessions-dir", str(corpus.path))
    assert result.exit_code == 0, result.output
    assert mode(cache) == 0o700
    assert mode(db) == 0o600 and mode(f"{db}.lock") == 0o600  # the -wal and -shm went with the last connection
    assert f"mode 0700 {cache} (private)" in result.output
    for name in index_files(db):  # status shows them while its connection is open
        assert f"mode 0600 {name} (private)" in result.output


def test_wal_and_shm_left_read_only_are_made_writable_again(corpus: Corpus, db_path: Path) -> None:
    """SQLite gives the -wal and -shm it creates the database's mode: a call against an index made
    read-only (0400) left them 0400, and once the index was writable again every write failed
    "attempt to write a readonly database", for good (found by an independent test). As root the
    failure does not show, since permissions do not bind root; the modes do."""
    corpus.write("a", session("secret"))
    open_index(db_path, str(corpus.path)).close()
    # As the read-only run left them, not empty (SQLite itself fixes the mode of an empty one).
    for suffix, size in (("-wal", 32), ("-shm", 32768)):
        Path(f"{db_path}{suffix}").write_bytes(bytes(size))
        os.chmod(f"{db_path}{suffix}", 0o400)
    index = open_handle(db_path, str(corpus.path))
    try:
        assert {suffix: mode(f"{db_path}{suffix}") for suffix in ("-wal", "-shm")} == {"-wal": 0o600, "-shm": 0o600}
    finally:
        index.close()


def test_a_directory_the_user_chose_is_warned_about_not_changed(
    corpus: Corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    db = shared / "index.sqlite"
    with caplog.at_level(logging.WARNING, logger="ccweb_index"):
        open_index(db, str(corpus.path)).close()
    assert mode(shared) == 0o755, "not ours to chmod"
    assert mode(db) == 0o600
    assert f"run `chmod go-rwx {shared}`" in caplog.text

    result = cli("status", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert f"mode 0755 {shared} (open to other users: run `chmod go-rwx {shared}`)" in result.output


def test_a_shared_sticky_directory_gets_advice_to_move_not_to_chmod(
    corpus: Corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "like-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with caplog.at_level(logging.WARNING, logger="ccweb_index"):
        open_index(shared / "index.sqlite", str(corpus.path)).close()
    assert mode(shared) == 0o1777
    assert "use a --db in a directory of your own" in caplog.text
    assert "chmod" not in caplog.text


# --- as another user -----------------------------------------------------------------------------


def as_nobody(paths: list[str]) -> dict[str, str]:
    """In a forked child that dropped to `nobody`: what reading each path gives ("read" or the
    error), and what SQLite's immutable open of the first one gives (the attack in issue #11)."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("there is no `nobody` user to read as")
    if os.geteuid() != 0:
        pytest.skip("dropping to another uid needs root; the mode tests above cover this case")
    return json.loads(as_user(nobody.pw_uid, nobody.pw_gid, lambda: json.dumps(_attempts(paths))) or "{}")


def as_user(uid: int, gid: int, work: Callable[[], str]) -> str:
    """What `work` returns in a forked child that dropped to `uid` and `gid` (what it imports must be
    imported already: the interpreter's own files may not be readable to that user)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only os._exit
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                said = work()
            except BaseException as exc:
                said = f"{type(exc).__name__}: {exc}"
            os.write(writer, said.encode())
        finally:
            os._exit(0)
    os.close(writer)
    try:
        ready, _, _ = select.select([reader], [], [], 60)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the child running as uid {uid} hung")
        with os.fdopen(reader, "rb") as pipe:
            return pipe.read().decode()
    finally:
        os.waitpid(pid, 0)


def _attempts(paths: list[str]) -> dict[str, str]:
    found = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.read(1)
            found[path] = "read"
        except OSError as exc:
            found[path] = type(exc).__name__
    try:
        conn = sqlite3.connect(f"file:{paths[0]}?immutable=1", uri=True)
        found["sql"] = repr(conn.execute("SELECT content FROM user_inputs").fetchall())
    except sqlite3.Error as exc:
        found["sql"] = type(exc).__name__
    return found


@pytest.fixture
def shared_base() -> Iterator[Path]:
    # Every directory up to here must be enterable by nobody, or the check proves nothing:
    # pytest's tmp_path lives under a 0700 directory.
    base = Path(tempfile.mkdtemp(prefix="ccweb-privacy-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def test_another_user_cannot_read_an_index_in_a_shared_directory(shared_base: Path, umask) -> None:
    umask(0o022)
    sessions = shared_base / "sessions"
    Corpus(sessions).write("a", session("my secret"))
    os.chmod(sessions, 0o700)
    shared = shared_base / "shared"
    shared.mkdir(mode=0o755)
    control = shared / "control"
    control.write_bytes(b"x")  # 0644: proves nobody can reach this directory's files at all
    db = shared / "index.sqlite"
    service = Service(sessions, db)  # held open: the -wal and -shm exist
    try:
        service.indexer.reconcile()
        assert "my secret" in json.dumps(service.call("ccweb_list_user_inputs", {"conversationId": "a"}, None).text())
        seen = as_nobody([str(db), *index_files(db)[1:], str(control)])
    finally:
        service.close()
    assert seen.pop(str(control)) == "read"
    assert seen.pop("sql") in ("OperationalError", "DatabaseError")
    assert set(seen.values()) == {"PermissionError"}, seen


def test_another_user_cannot_enter_the_default_cache_directory(
    shared_base: Path, monkeypatch: pytest.MonkeyPatch, umask
) -> None:
    umask(0o022)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_base / "cache"))
    sessions = Corpus(shared_base / "sessions")
    sessions.write("a", session("my secret"))
    assert cli("build", "--sessions-dir", str(sessions.path)).exit_code == 0
    os.chmod(shared_base / "cache", 0o755)  # a cache root that exists already, open to all
    (db,) = (shared_base / "cache" / "ccweb-index").glob("*.sqlite")
    seen = as_nobody([str(db), f"{db}.lock"])
    assert seen == {str(db): "PermissionError", f"{db}.lock": "PermissionError", "sql": "OperationalError"}


# --- never inside the sessions directory ----------------------------------------------------------


COMMANDS = [
    ("build",),
    ("watch",),
    ("status",),
    ("call", "ccweb_list_conversations"),
    ("serve",),
    ("serve", "--transport", "http", "--port", "0"),
]


def inside_cases(tmp_path: Path, sessions: Path) -> list[tuple[str, str]]:
    """(sessions dir as given, db as given) pairs whose db resolves inside the sessions directory."""
    link = tmp_path / "link-to-sessions"
    link.symlink_to(sessions)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "into").symlink_to(sessions / "sub", target_is_directory=True)
    (sessions / "sub").mkdir()
    return [
        (str(sessions), str(sessions / "evil.json")),
        (str(sessions), str(sessions / "sub" / "x.sqlite")),
        (str(sessions), str(sessions / "new" / "deeper" / "x.sqlite")),
        (str(sessions), str(link / "x.sqlite")),  # a symlink into the sessions directory
        (str(link), str(sessions / "x.sqlite")),  # the sessions directory given through a symlink
        (str(sessions), str(elsewhere / "into" / "new.sqlite")),  # a new file in a symlinked parent
        (str(sessions), str(tmp_path / "other" / ".." / "sessions" / "x.sqlite")),
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_index_inside_the_sessions_directory_is_refused(corpus: Corpus, tmp_path: Path, command: tuple[str, ...]) -> None:
    corpus.write("a", session("x"))
    for sessions, db in inside_cases(tmp_path, corpus.path):
        before = snapshot(corpus.path)
        for how in ("option", "env"):
            if how == "option":
                result = cli(*command, "--sessions-dir", sessions, "--db", db)
            else:
                result = cli(*command, env={"CCWEB_SESSIONS_DIR": sessions, "CCWEB_INDEX_DB": db})
            assert result.exit_code == 2, (how, db, result.output)
            message = " ".join(result.output.split())  # click wraps long lines
            assert db in message and os.path.realpath(sessions) in message, message
            assert "only ever read" in message
            assert snapshot(corpus.path) == before, f"{db} wrote into the sessions directory"


@pytest.mark.parametrize("suffix", INDEX_SUFFIXES)
def test_an_index_file_linked_to_a_session_file_is_refused(corpus: Corpus, tmp_path: Path, suffix: str) -> None:
    """A hard link is no path into the directory, yet tightening the index file's mode (or SQLite
    writing it) would change the session file (found by an independent test)."""
    corpus.write("a", session("x"))
    db = tmp_path / "index" / "x.sqlite"
    db.parent.mkdir()
    os.link(corpus.file("a"), f"{db}{suffix}")
    before = snapshot(corpus.path)
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert result.exit_code == 2, result.output
    assert "hard link" in " ".join(result.output.split()), result.output
    assert snapshot(corpus.path) == before


@pytest.mark.parametrize(
    ("option", "where"), [("--unix-socket", "{sessions}/evil.sock"), ("XDG_CONFIG_HOME", "{sessions}/.config")]
)
def test_no_file_of_the_http_server_is_made_inside_the_sessions_directory(
    corpus: Corpus, tmp_path: Path, option: str, where: str
) -> None:
    """Its socket and its default token file are refused there as the index is (exit 2)."""
    corpus.write("a", session("x"))
    before = snapshot(corpus.path)
    path = where.format(sessions=corpus.path)
    args, env = (["--unix-socket", path], {}) if option.startswith("--") else ([], {option: path})
    result = cli("serve", "--transport", "http", "--sessions-dir", str(corpus.path), "--db", str(tmp_path / "x.sqlite"), *args, env=env)
    assert result.exit_code == 2, result.output
    assert "only ever read" in " ".join(result.output.split()), result.output
    assert snapshot(corpus.path) == before


def test_an_index_beside_the_sessions_directory_is_accepted(corpus: Corpus, tmp_path: Path) -> None:
    corpus.write("a", session("x"))
    db = tmp_path / f"{corpus.path.name}-index" / "x.sqlite"  # shares the name as a prefix, not the directory
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert db.exists()


def test_an_index_inside_a_bind_mount_of_the_sessions_directory_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    # realpath cannot see through a bind mount; the device-and-inode walk up the tree does.
    view = tmp_path / "view"
    view.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(corpus.path), str(view)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here (needs root and mount rights)")
    try:
        result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(view / "x.sqlite"))
        assert result.exit_code == 2, result.output
        assert not (corpus.path / "x.sqlite").exists()
    finally:
        subprocess.run(["umount", str(view)], check=True)


# --- files another user put where the index goes (found by an independent test, as real users) -----

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make files of another user")
OTHER_UID = 65534


def kept(paths: list[Path]) -> dict[Path, tuple[bytes, int, int]]:
    """What each file holds, its mode and its owner: what opening an index beside them must not change."""
    return {path: (path.read_bytes(), mode(path), path.stat().st_uid) for path in paths}


def another_programs_database(path: Path) -> Path:
    """An SQLite database of another program's (a browser's bookmarks), readable by others."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE bookmarks (url)")
    conn.close()
    path.chmod(0o644)
    return path


def answered_from_the_files_after_back_offs(svc: Service) -> None:
    """Session "b" ("more of my words", written after the index was tampered with) is answered from
    the files: at the replacement, then at the opens after its back-off (set to nothing)."""
    for _ in range(3):
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "b"}, None)
        assert [item["content"] for item in result.payload["inputs"]] == ["more of my words"]


def test_a_lock_that_leads_to_a_file_of_the_users_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    """Another user who can write the index's directory named the `.lock` as a symlink to one of the
    user's files: opening the index truncated it, wrote the lock's signature into it and made it
    0600, a session file included (a conversation lost). A hard link to a file outside the sessions
    directory did the same."""
    corpus.write("a", session("my words"))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("chapter one\n")
    thesis.chmod(0o644)
    linked = shared / "linked.sqlite"
    os.link(thesis, f"{linked}.lock")
    symlinked = shared / "symlinked.sqlite"
    Path(f"{symlinked}.lock").symlink_to(corpus.file("a"))
    before, sessions = kept([thesis, corpus.file("a")]), snapshot(corpus.path)
    for db, reason in ((symlinked, "is a symbolic link"), (linked, "has other names (hard links)")):
        result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
        message = " ".join(result.output.split())
        assert result.exit_code == 1 and f"{db}.lock {reason}" in message, result.output
        assert not db.exists()
    assert kept([thesis, corpus.file("a")]) == before and snapshot(corpus.path) == sessions


@as_root
@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal", ".lock"])
def test_an_index_file_of_another_user_is_refused(corpus: Corpus, tmp_path: Path, suffix: str) -> None:
    """Pre-created by another user where the index goes, it was only warned about: the user's words
    went into a file its owner can read, and can rewrite, to forge what the user asked for."""
    corpus.write("a", session("my words"))
    db = tmp_path / "shared" / "x.sqlite"
    db.parent.mkdir()
    db.parent.chmod(0o2775)  # a group's project directory
    planted = Path(f"{db}{suffix}")
    planted.write_bytes(LOCK_SIGNATURE if suffix == ".lock" else b"")
    planted.chmod(0o666)
    os.chown(planted, OTHER_UID, OTHER_UID)
    before = kept([planted])
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and f"belongs to another user (uid {OTHER_UID})" in message, result.output
    assert kept([planted]) == before
    assert b"my words" not in b"".join(path.read_bytes() for path in db.parent.iterdir() if path.is_file())


@as_root
def test_a_signed_lock_of_another_user_makes_no_database_ours(corpus: Corpus, tmp_path: Path) -> None:
    """The index path a symlink to another program's database, and beside the link a `.lock` with
    our signature, made by another user: the database was taken for an index, chmodded and written."""
    app = another_programs_database(tmp_path / "app.sqlite")
    db = tmp_path / "shared" / "x.sqlite"
    db.parent.mkdir()
    db.parent.chmod(0o1777)
    db.symlink_to(app)
    lock = Path(f"{db}.lock")
    lock.write_bytes(LOCK_SIGNATURE)
    os.chown(lock, OTHER_UID, OTHER_UID)
    before = kept([app, lock])
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
    assert result.exit_code == 1 and "holding bookmarks" in " ".join(result.output.split()), result.output
    assert kept([app, lock]) == before


@as_root
def test_in_a_directory_only_its_owner_can_write_any_owner_is_taken(corpus: Corpus, tmp_path: Path) -> None:
    """Nobody but its owner (or root) can have put a file there, and some filesystems report every
    file as another user's (NFS with unmatched id maps: `nobody`): the index is used."""
    corpus.write("a", session("my words"))
    db = tmp_path / "private" / "x.sqlite"
    db.parent.mkdir(mode=0o700)
    db.write_bytes(b"")
    os.chown(db, OTHER_UID, OTHER_UID)
    result = cli("call", "ccweb_list_user_inputs", '{"conversationId": "a"}', "--sessions-dir", str(corpus.path),
                 "--db", str(db))  # fmt: skip
    assert result.exit_code == 0 and "my words" in result.output, result.output
    assert "index" not in result.output.lower() or "cannot" not in result.output.lower(), result.output
    assert db.stat().st_size > 0  # the index is in it


@as_root
@pytest.mark.parametrize("renamed", [False, True], ids=["left", "renamed-away"])
@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_file_of_another_user_put_down_just_before_sqlite_opens_it_is_refused(
    shared_base: Path, suffix: str, renamed: bool
) -> None:
    """The names are judged just before SQLite opens them by name; another user who can write the
    directory, watching it with inotify, puts a file of theirs at one in between (an independent test
    won 4 of 4 against a running server it made replace its index, and read every word from its
    `-wal`). Judged again by name once SQLite held it, it was renamed away as soon as SQLite had
    opened it (the next test: 10 of 10 servers). What SQLite opened is judged, whatever its name,
    before any word is written. The user is `nobody` here: SQLite run by root gives its journals
    the database's owner, which hides the race."""
    from ccweb_index.indexer import db as dbmod

    try:
        user, them = pwd.getpwnam("nobody").pw_uid, OTHER_UID - 1
    except KeyError:
        pytest.skip("there is no `nobody` user to run as")
    project = shared_base / "project"
    project.mkdir()
    project.chmod(0o777)  # a group's project directory, its members all in `others` here
    db, theirs = project / "x.sqlite", project / "theirs"
    theirs.write_bytes(b"")
    theirs.chmod(0o666)
    os.chown(theirs, them, them)
    prepare, migrate = dbmod.prepare_database, dbmod._migrate_and_claim

    def then_theirs(path: Path) -> None:
        prepare(path)  # the last check of the names: the race is won after it
        os.replace(theirs, f"{path}{suffix}")

    def then_hidden(conn: sqlite3.Connection, sessions_dir: str) -> None:
        migrate(conn, sessions_dir)  # SQLite has opened every file by now
        if renamed:
            os.replace(f"{db}{suffix}", project / ".hidden")

    def open_it() -> str:
        dbmod.prepare_database, dbmod._migrate_and_claim = then_theirs, then_hidden  # in the child only
        try:
            dbmod.open_handle(db, str(shared_base / "sessions")).close()
        except IndexMismatch as exc:
            return str(exc)
        return "opened"

    import sqlite_utils  # noqa: F401  (imported by a migration, in the child)

    from ccweb_index.migrations import migrations  # noqa: F401

    said = " ".join(as_user(user, user, open_it).split())
    name = project / ".hidden" if renamed else f"{db}{suffix}"
    assert f"{name}, which SQLite opened for the index, belongs to another user (uid {them})" in said, said


@as_root
def test_a_file_of_another_user_put_in_the_index_s_place_is_refused_too(corpus: Corpus, tmp_path: Path) -> None:
    """While a server runs: it notices its index replaced and opens what is now at the path, which was
    not checked as a file there at the start is (found by a review): another user's file received the
    user's words."""
    corpus.write("a", session("my words"))
    db = tmp_path / "shared" / "x.sqlite"
    db.parent.mkdir()
    db.parent.chmod(0o1777)
    svc = Service(corpus.path, db)
    svc.start()
    try:
        assert svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None).payload["inputs"]
        theirs = tmp_path / "shared" / "theirs"
        theirs.write_bytes(b"")
        theirs.chmod(0o666)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        os.replace(theirs, db)
        corpus.write("b", session("more of my words"))
        result = svc.call("ccweb_list_user_inputs", {"conversationId": "b"}, None)
        assert [item["content"] for item in result.payload["inputs"]] == ["more of my words"]  # from the files
    finally:
        svc.close()
    assert db.read_bytes() == b"" and db.stat().st_uid == OTHER_UID


def _their_directory(tmp_path: Path) -> Path:
    """A directory of another user's that only they can write, holding an index's files of theirs."""
    theirs = tmp_path / "their-home"
    theirs.mkdir(mode=0o755)
    for suffix in ("", "-wal", "-shm", ".lock"):
        planted = theirs / f"trap.sqlite{suffix}"
        planted.write_bytes(b"")
        planted.chmod(0o666)
        os.chown(planted, OTHER_UID, OTHER_UID)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    return theirs


@as_root
def test_a_link_another_user_put_where_others_decide_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    """In a group's project directory, another user's symlink at the index path, into a directory of
    theirs: every check was asked of the directory the link leads to, which only they can write, so
    their files were taken as they came and received the user's words (an independent review)."""
    corpus.write("a", session("my words"))
    theirs = _their_directory(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2777)
    db = project / "x.sqlite"
    db.symlink_to(theirs / "trap.sqlite")
    os.lchown(db, OTHER_UID, OTHER_UID)
    before = kept(sorted(theirs.iterdir()))
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(db))
    message = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"{db} is a symbolic link that belongs to another user (uid {OTHER_UID})" in message, result.output
    assert kept(sorted(theirs.iterdir())) == before


@as_root
def test_in_a_directory_of_another_user_their_files_are_refused(corpus: Corpus, tmp_path: Path) -> None:
    """Only its owner can write it, but its owner is not the user: they put the files there, and can
    read what goes into them (an independent review, through a symlink of theirs)."""
    corpus.write("a", session("my words"))
    theirs = _their_directory(tmp_path)
    before = kept(sorted(theirs.iterdir()))
    result = cli("build", "--sessions-dir", str(corpus.path), "--db", str(theirs / "trap.sqlite"))
    assert result.exit_code == 1, result.output
    assert f"belongs to another user (uid {OTHER_UID})" in " ".join(result.output.split()), result.output
    assert kept(sorted(theirs.iterdir())) == before


def test_a_link_put_in_the_index_s_place_is_not_followed(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a server runs, its index replaced by a symlink to another program's database: the signed
    `.lock` beside it, written by the server itself, vouched for it, and the database was made 0600,
    put in WAL mode and migrated into (an independent review). It answers from the files instead,
    and the next try to open the index, after no back-off here, follows no link either."""
    from ccweb_index.indexer import handle

    monkeypatch.setattr(handle, "BACK_OFF_SECONDS", (0.0, 0.0))
    corpus.write("a", session("my words"))
    app = another_programs_database(tmp_path / "app.sqlite")
    db = tmp_path / "project" / "x.sqlite"
    db.parent.mkdir()
    svc = Service(corpus.path, db)
    svc.start()
    try:
        assert svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None).payload["inputs"]
        before = kept([app])
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.symlink_to(app)
        corpus.write("b", session("more of my words"))
        answered_from_the_files_after_back_offs(svc)
    finally:
        svc.close()
    assert kept([app]) == before
    with sqlite3.connect(f"file:{app}?mode=ro", uri=True) as conn:
        assert [row[0] for row in conn.execute("SELECT name FROM sqlite_master")] == ["bookmarks"]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


@pytest.mark.parametrize("what", ["a directory", "a link to the sessions directory"])
def test_the_index_s_directory_swapped_under_a_server_is_not_followed(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """The user's private index directory, inside a group's project directory, swapped by a member
    of the group for a directory of theirs (or a link to the sessions directory) while a server ran:
    the server made its index again there, and the other user read the user's words from a -wal
    they had put beside it (an independent review). It answers from the files instead."""
    from ccweb_index.indexer import handle

    monkeypatch.setattr(handle, "BACK_OFF_SECONDS", (0.0, 0.0))
    corpus.write("a", session("my words"))
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2777)
    mine = project / "me"
    mine.mkdir(mode=0o700)
    svc = Service(corpus.path, mine / "x.sqlite")
    svc.start()
    try:
        assert svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None).payload["inputs"]
        mine.rename(project / "me.old")
        if what == "a directory":
            mine.mkdir()
            mine.chmod(0o777)
        else:
            mine.symlink_to(corpus.path)
        before = sorted(os.listdir(corpus.path))
        corpus.write("b", session("more of my words"))
        answered_from_the_files_after_back_offs(svc)
    finally:
        svc.close()
    assert sorted(os.listdir(mine)) == (sorted([*before, "b.json"]) if what != "a directory" else [])


def test_an_index_in_use_in_a_group_directory_is_opened_by_a_second_process(corpus: Corpus, tmp_path: Path) -> None:
    """Its records still in its -wal (a first pass under way, or stopped before a checkpoint): while
    the `.lock` vouched for nothing in such a directory, every second process (a `call`, another
    conversation's `serve`) and every restart was refused (a review)."""
    corpus.write("a", session("my words"))
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2775)
    db = project / "x.sqlite"
    first = open_index(db, str(corpus.path))  # kept open: nothing is checkpointed into the file
    try:
        assert Path(f"{db}-wal").stat().st_size > 0
        result = cli("call", "ccweb_list_user_inputs", '{"conversationId": "a"}', "--sessions-dir", str(corpus.path),
                     "--db", str(db))  # fmt: skip
        assert result.exit_code == 0 and "my words" in result.output, result.output
    finally:
        first.close()


def test_the_index_s_directory_swapped_before_its_first_open_is_not_followed(corpus: Corpus, tmp_path: Path) -> None:
    """Between the path's resolution and a first open (which may fail, and be tried again later),
    the index's directory swapped for a link to the sessions directory: the checks of a running
    server began only after a first open had worked, and the index was made in the sessions
    directory (a review)."""
    corpus.write("a", session("my words"))
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2777)
    mine = project / "me"
    mine.mkdir(mode=0o700)
    from ccweb_index.indexer.db import resolve_db_path
    from ccweb_index.indexer.errors import IndexMismatch
    from ccweb_index.indexer.handle import IndexHandle

    handle = IndexHandle(resolve_db_path(corpus.path, mine / "x.sqlite"), str(corpus.path))
    mine.rename(project / "me.old")
    mine.symlink_to(corpus.path)
    before = sorted(os.listdir(corpus.path))
    with handle.lock, pytest.raises(IndexMismatch, match="was replaced"):
        handle.open()
    handle.close()
    assert sorted(os.listdir(corpus.path)) == before


def test_the_index_s_own_directory_deleted_under_servers_is_made_again(corpus: Corpus, tmp_path: Path) -> None:
    """`rm -rf` of the directory of one's own `--db` while servers run (one per conversation): the
    index is a cache, so it is made again there, by whichever server looks first, and the others
    open it (it was refused as "replaced" until a restart: a review)."""
    corpus.write("a", session("my words"))
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    db = mine / "x.sqlite"
    servers = [Service(corpus.path, db), Service(corpus.path, db)]
    for svc in servers:
        svc.start()
    try:
        for svc in servers:
            assert svc.call("ccweb_list_user_inputs", {"conversationId": "a"}, None).payload["inputs"]
        shutil.rmtree(mine)
        corpus.write("b", session("more of my words"))
        for svc in servers:
            result = svc.call("ccweb_list_user_inputs", {"conversationId": "b"}, None)
            assert [item["content"] for item in result.payload["inputs"]] == ["more of my words"]
            assert svc.handle.is_open, svc.handle.reason
        assert db.exists()
    finally:
        for svc in servers:
            svc.close()
    assert mode(mine) == 0o700


def test_a_symlinked_index_keeps_its_lock_and_its_checks_beside_its_file(corpus: Corpus, tmp_path: Path) -> None:
    """SQLite keeps the -wal and -shm beside the file a symlink leads to, but their modes were
    tightened, and `status` measured and listed them, beside the link: a -wal another user made
    there went unseen, and `status` said 0.0 MB of WAL (found by an independent test)."""
    corpus.write("a", session("my words"))
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    target, link = tmp_path / "real" / "x.sqlite", tmp_path / "links" / "x.sqlite"
    link.symlink_to(target)
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(link)).exit_code == 0
    assert Path(f"{target}.lock").exists() and not Path(f"{link}.lock").exists()
    Path(f"{target}-wal").write_bytes(b"")
    Path(f"{target}-wal").chmod(0o644)
    result = cli("status", "--sessions-dir", str(corpus.path), "--db", str(link))
    assert result.exit_code == 0, result.output
    assert f"index: {target} " in result.output, result.output
    assert f"mode 0600 {target}-wal (private)" in result.output, result.output  # tightened, then listed


@as_root
def test_where_the_filesystem_reports_another_owner_for_our_own_files_they_are_ours(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NFS with root_squash or unmatched id maps reports `nobody` for the files this process makes,
    so the index it had just made, in a directory its group can write, was refused as another
    user's (found by a review). What owner the filesystem gives a new file is asked by making one."""
    from ccweb_index.indexer import private

    corpus.write("a", session("my words"))
    shared = tmp_path / "project"
    shared.mkdir()
    shared.chmod(0o2775)
    db = shared / "x.sqlite"
    assert cli("build", "--sessions-dir", str(corpus.path), "--db", str(db)).exit_code == 0
    for path in shared.iterdir():
        os.chown(path, OTHER_UID, OTHER_UID)  # as such a filesystem shows them
    # raising=False: the code before had no such question to ask, and must fail the test, not its set-up.
    monkeypatch.setattr(private, "_uid_of_new_files", lambda directory: OTHER_UID, raising=False)
    result = cli("call", "ccweb_list_user_inputs", '{"conversationId": "a"}', "--sessions-dir", str(corpus.path),
                 "--db", str(db))  # fmt: skip
    assert result.exit_code == 0 and "my words" in result.output, result.output
    assert sorted(path.name for path in shared.iterdir() if ".ccweb-index-probe" in path.name) == []


def test_the_cache_directory_is_made_private_before_its_files_are_judged(corpus: Corpus, cache: Path) -> None:
    """Our own cache directory, found open to the group, with a `.lock` that has a second name (a
    backup by hard links): refused as if another user could have put it there, and the directory
    never tightened (found by a review). Tightened first, it is no directory others can write."""
    from ccweb_index.indexer.db import default_db_path

    corpus.write("a", session("my words"))
    cache.mkdir(parents=True)
    cache.chmod(0o775)
    lock = Path(f"{default_db_path(corpus.path)}.lock")
    lock.write_bytes(b"")
    os.link(lock, cache.parent / "a-backup-of-the-lock")
    result = cli("build", "--sessions-dir", str(corpus.path))
    assert result.exit_code == 0, result.output
    assert mode(cache) == 0o700
