"""A credential by default (issue #11 item 2): a generated private token for TCP, or a unix socket
that admits only this uid."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from test_http import (
    INITIALIZE,
    LIST_INPUTS,
    MCP_HEADERS,
    OWN_INPUTS,
    SOURCE_HEADER,
    _clean_env,
    http_client_for,
    http_server,
    raw_post,
    write_two_families,
)

from conftest import CCWEB_INDEX, Corpus


def test_without_a_token_one_is_made_private_and_kept(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """Before: no token meant any local user could read every conversation. Now a token is made once,
    0600 in a 0700 directory whatever the umask, named in the log, and the same on every start."""
    write_two_families(corpus)
    token_file = tmp_path / "config" / "ccweb-index" / "token"
    old_umask = os.umask(0)
    try:
        with http_server(corpus.path, db_path, tmp_path / "log") as server:
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            token = token_file.read_text().strip()
            assert len(token) >= 32
            assert f"token created in {token_file}" in server.stderr() and token not in server.stderr()
            refused = raw_post(server, {SOURCE_HEADER: "orchA"})
            assert refused.status_code == 401 and "ccweb-index token" in refused.json()["error"]["message"]
            with http_client_for(server.url, token=token, source="orchA") as client:
                payload, is_error = client.call(LIST_INPUTS)
                assert not is_error and [i["content"] for i in payload["inputs"]] == OWN_INPUTS["orchA"]
    finally:
        os.umask(old_umask)
    token_file.chmod(0o644)  # loosened by someone: tightened at the next start
    with http_server(corpus.path, db_path, tmp_path / "log2") as server:
        assert f"token kept in {token_file}" in server.stderr()
        assert "was readable by other users" in server.stderr()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert raw_post(server, {"Authorization": f"Bearer {token}"}).status_code == 200
    printed = subprocess.run([CCWEB_INDEX, "token"], capture_output=True, text=True, timeout=60,
                             env=_clean_env(XDG_CONFIG_HOME=str(tmp_path / "config")))  # fmt: skip
    assert printed.returncode == 0 and printed.stdout.strip() == token


def test_a_default_token_file_edited_into_no_header_value_is_refused(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """A second line added to the default token file made a token no client can send in a header:
    the server started and refused every request (found by an independent test). It is checked as
    --token-file and CCWEB_INDEX_TOKEN are."""
    write_two_families(corpus)
    token_file = tmp_path / "config" / "ccweb-index" / "token"
    token_file.parent.mkdir(parents=True, mode=0o700)
    token_file.write_text("first-line-token-0123456789\nsecond line\n")
    token_file.chmod(0o600)
    command = [CCWEB_INDEX, "serve", "--transport", "http", "--port", "0",
               "--sessions-dir", str(corpus.path), "--db", str(db_path)]  # fmt: skip
    env = _clean_env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    # A short time-out: without the check the server starts, and runs until it is killed.
    result = subprocess.run(command, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL, env=env)
    assert result.returncode == 1, result.stderr
    assert f"the token from the token file {token_file} must be printable ASCII without spaces" in result.stderr
    assert "Traceback" not in result.stderr and not db_path.exists()
    printed = subprocess.run([CCWEB_INDEX, "token"], capture_output=True, text=True, timeout=60, env=env)
    assert printed.returncode == 1 and "must be printable ASCII" in printed.stderr and not printed.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user's needs root")
@pytest.mark.parametrize("which", ["default", "--token-file"])
def test_a_token_file_another_user_made_or_can_write_is_refused(
    tmp_path: Path, corpus: Corpus, db_path: Path, which: str
) -> None:
    """Where the config directory is one others can write, another user put a token file of theirs
    where the default one goes, with a token they knew, and called every tool; a `--token-file` of
    theirs was only warned about ("chmod 600 it", which the user cannot do). Either is refused, as is
    one of the user's that others can write, before the server listens."""
    write_two_families(corpus)
    token_file = tmp_path / "config" / "ccweb-index" / "token"
    token_file.parent.mkdir(parents=True, mode=0o700)
    command = [CCWEB_INDEX, "serve", "--transport", "http", "--port", "0",
               "--sessions-dir", str(corpus.path), "--db", str(db_path)]  # fmt: skip
    if which == "--token-file":
        command += ["--token-file", str(token_file)]
    env = _clean_env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    for owner, mode, says in ((65534, 0o600, "belongs to another user (uid 65534)"),
                              (os.geteuid(), 0o620, "other users can write the token file")):  # fmt: skip
        token_file.write_text("a-token-they-know-0123456789abcdef\n")
        token_file.chmod(mode)
        os.chown(token_file, owner, owner)
        # A short time-out: without the check the server starts, and runs until it is killed.
        result = subprocess.run(command, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL, env=env)
        assert result.returncode == 1 and says in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and not db_path.exists()
    if which == "default":  # `ccweb-index token` would hand it to the user's clients
        printed = subprocess.run([CCWEB_INDEX, "token"], capture_output=True, text=True, timeout=60, env=env)
        assert printed.returncode == 1 and "other users can write" in printed.stderr and not printed.stdout


def test_a_configured_token_wins_and_no_file_is_made(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    write_two_families(corpus)
    with http_server(corpus.path, db_path, tmp_path / "log", token="configured-token-0123456789") as server:
        assert raw_post(server, {"Authorization": "Bearer configured-token-0123456789"}).status_code == 200
    assert not (tmp_path / "config").exists()


# --- the unix socket ---------------------------------------------------------------------------------------


@contextmanager
def unix_server(corpus: Corpus, db: Path, path: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    command = [CCWEB_INDEX, "serve", "--transport", "http", "--unix-socket", str(path),
               "--sessions-dir", str(corpus.path), "--db", str(db)]  # fmt: skip
    with open(log, "wb") as err:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=_clean_env(XDG_CONFIG_HOME=str(log.parent / "config"), **(env or {})))  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while uds_get(path, "/healthz") != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == 0


def uds_get(path: Path, target: str, headers: dict[str, str] | None = None) -> int | None:
    try:
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(path))) as client:
            return client.get(f"http://localhost{target}", headers=headers, timeout=10).status_code
    except httpx2.TransportError:
        return None


def test_unix_socket_private_no_token_needed(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """0600 whatever the umask; this uid's clients need no token (the SDK's client, over the socket);
    no token file is made; the socket file goes at exit."""
    write_two_families(corpus)
    path = tmp_path / "ccweb.sock"
    old_umask = os.umask(0)
    try:
        with unix_server(corpus, db_path, path, tmp_path / "log"):
            assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
            assert f"serving MCP on unix:{path}" in (tmp_path / "log").read_text()
            with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(path))) as client:
                headers = {**MCP_HEADERS, SOURCE_HEADER: "orchB"}
                assert client.post("http://localhost/mcp", json=INITIALIZE, headers=headers, timeout=10).status_code == 200
                answer = client.post("http://localhost/mcp", headers=headers, timeout=30, json={
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": LIST_INPUTS, "arguments": {}}})  # fmt: skip
                assert answer.status_code == 200 and "plan B" in answer.text
                assert uds_get(path, "/healthz?detail=1") == 200
                assert "sessions" in client.get("http://localhost/healthz?detail=1", timeout=10).json()
    finally:
        os.umask(old_umask)
    assert not path.exists(), "the socket file was left behind"
    assert not (tmp_path / "config").exists(), "a token was made for a unix socket"


def test_unix_socket_with_a_configured_token_still_needs_it(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    path = tmp_path / "ccweb.sock"
    token = "socket-token-0123456789abcdef"
    with unix_server(corpus, db_path, path, tmp_path / "log", env={"CCWEB_INDEX_TOKEN": token}):
        assert uds_get(path, "/mcp") == 401
        assert uds_get(path, "/healthz?detail=1", {"Authorization": f"Bearer {token}"}) == 200


def _as_nobody_connect(path: Path) -> str:
    """In a child that dropped to nobody: connect to `path` and send a request; what came of it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        outcome = b"?"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(str(path))
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                data = sock.recv(100)
                outcome = b"answered: " + data if data else b"closed"
            except (ConnectionResetError, BrokenPipeError):
                outcome = b"closed"
        except PermissionError:
            outcome = b"permission denied"
        except BaseException as exc:
            outcome = repr(exc).encode()
        os.write(write, outcome)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        outcome = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return outcome


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_unix_socket_refuses_another_uid(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """As nobody: the 0600 socket cannot be connected to; even opened up (chmod 666), the peer's uid
    (SO_PEERCRED) gets the connection closed without an answer."""
    write_two_families(corpus)
    reachable = Path(tempfile.mkdtemp(prefix="ccweb-sock-", dir="/tmp"))  # pytest's tmp_path is 0700 from /tmp on
    reachable.chmod(0o755)
    path = reachable / "ccweb.sock"
    try:
        with unix_server(corpus, db_path, path, tmp_path / "log"):
            assert _as_nobody_connect(path) == "permission denied"
            path.chmod(0o666)
            assert _as_nobody_connect(path) == "closed"
            assert uds_get(path, "/healthz") == 200  # this uid still gets in
            log = (tmp_path / "log").read_text()
            assert re.search(r"refused a unix-socket connection from uid 65534", log), log
    finally:
        shutil.rmtree(reachable)


def test_unix_socket_path_checks(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """A stale socket file is replaced; a regular file, or a socket someone listens on, is refused;
    --unix-socket with --port is a usage error."""
    stale = tmp_path / "stale.sock"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(stale))
    left.close()  # the file stays, nobody listens
    with unix_server(corpus, db_path, stale, tmp_path / "log"):
        pass

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CCWEB_INDEX, "serve", "--transport", "http", *args, "--sessions-dir", str(corpus.path),
                               "--db", str(db_path)], capture_output=True, text=True, env=_clean_env(), timeout=60)  # fmt: skip

    regular = tmp_path / "file"
    regular.write_text("keep me")
    result = serve("--unix-socket", str(regular))
    assert result.returncode == 1 and "is not a socket" in result.stderr and regular.read_text() == "keep me"
    busy = tmp_path / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(busy))
    listener.listen(1)
    try:
        result = serve("--unix-socket", str(busy))
        assert result.returncode == 1 and "another server is listening" in result.stderr
    finally:
        listener.close()
    result = serve("--unix-socket", str(tmp_path / "x.sock"), "--port", "9")
    assert result.returncode == 2 and "--unix-socket replaces --host and --port" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make a socket of another user")
def test_a_socket_of_another_user_at_the_path_is_refused(tmp_path: Path, corpus: Corpus, db_path: Path) -> None:
    """Theirs, live or not, in a sticky /tmp it cannot be removed: the start ended in a traceback
    (PermissionError), and a socket whose connect was refused (EACCES) was taken for a stale one."""
    theirs = tmp_path / "theirs.sock"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(theirs))
    left.close()
    os.chown(theirs, 65534, 65534)
    result = subprocess.run([CCWEB_INDEX, "serve", "--transport", "http", "--unix-socket", str(theirs), "--sessions-dir",
                             str(corpus.path), "--db", str(db_path)], capture_output=True, text=True, env=_clean_env(),
                            timeout=60)  # fmt: skip
    assert result.returncode == 1 and "is a socket of another user (uid 65534)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and theirs.stat().st_uid == 65534


@pytest.mark.parametrize("mode", [0o700, 0o2775, 0o1777])
def test_a_unix_socket_where_others_can_make_files_is_warned_about(
    tmp_path: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user renamed the user's socket in a group's directory and bound theirs at the path;
    the user's client then sent it the token (an independent test, as real users). Nothing said so."""
    import logging

    from ccweb_index.server.http import bind_unix_socket

    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(mode)
    caplog.set_level(logging.WARNING, logger="ccweb_index")
    bind_unix_socket(str(directory / "s.sock")).close()
    warned = [r.getMessage() for r in caplog.records if "the unix socket's directory" in r.getMessage()]
    assert len(warned) == (0 if mode == 0o700 else 1), warned


def test_a_token_file_of_root_s_that_others_can_read_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user linked the token file's name to a file of root's that everyone can read
    (/etc/machine-id), and so knew the token (an independent test, as real users); only "chmod 600
    it" was said, which the user cannot do. Root's own file that only root reads stays usable (an
    administrator may hand a user a token that way)."""
    from ccweb_index.server.http import StartupError, judge_token_file

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the user; the files below are root's

    def roots(mode: int) -> os.stat_result:
        return os.stat_result((stat.S_IFREG | mode, 1, 1, 1, 0, 0, 33, 0, 0, 0))

    with pytest.raises(StartupError, match="is root's and other users can read it"):
        judge_token_file("/etc/machine-id", roots(0o444))
    judge_token_file("/etc/ccweb-index/token", roots(0o400))
