"""`ccweb-index` processes for the tests, forked from a preloaded interpreter instead of exec'd.

A server start costs about a second of CPU before it does anything: the MCP SDK's imports (pydantic
building its models), uvicorn, starlette. The suite starts well over a hundred, and on 2 cores that
was most of its run time (docs/decisions.md, "A fast suite"). Each test worker keeps one *zygote*: an
interpreter of the same venv that has imported those third-party modules, holds no threads, no
files and none of this project's modules, and forks on request. The fork then becomes what exec
would have made, in the order a launch makes it: the request's descriptors on their numbers and
nothing else open, its environment (TZ included), working directory, umask, session or process
group, resource limits, CPU affinity and niceness, signal dispositions (what the test worker ignores stays
ignored) and mask. Only then does `Popen` return; what exec would refuse (a missing directory) is
raised by `Popen` as exec's error. Then the interpreter's own state: `sys.argv`, standard streams
shaped as at a start (buffered or not), bytecode writing, PYTHONPATH; it imports `ccweb_index` itself fresh, so that settings read from the
environment at import (indexer/tuning.py) are the request's, and runs exactly the console script's
code (`ccweb_index.__main__:main`). What stays the zygote's: the hash seed, `__main__`, the
command line /proc shows (tests find their server with `conftest.server_pid`), and `sys.flags` (the
settings the fork applies take effect; the flags still read as the zygote's).

The process is the test's own child, so that `Popen.wait`, the SDK's kill of its process group and
the asyncio child watcher work unchanged: the zygote forks twice, and the middle process exits
while the test worker is briefly a child subreaper (`PR_SET_CHILD_SUBREAPER`), which makes the
worker the server's parent. The flag is put back at once, so that other orphans go where they went.
A launch interrupted half-way (pytest-timeout's alarm, ^C) gives the zygote up for the rest of the
worker's run, rather than leave its reply to be read as the next launch's.

Only launches of the installed `ccweb-index` command are forked: the worker's own, through
`subprocess.Popen` (and so through the SDK's stdio client), and those of client processes the tests
run (the TypeScript SDK, the Inspector, Python SDK client processes), which are given
`launch_command()`, a small launcher that has this worker fork the server in its place (see below).
So are the worker's own starts of the tests' Python scripts (`python tests/.../SCRIPT.py ARGS`, no
options: the Python SDK client processes, the load test's and tests/test_http.py's), which import
the same SDK: the fork runs the script as `python` would (`_run_script`), with the script's
directory first on its path and `sys.argv` as `python` sets it; what the zygote imported is
already there, so an import the script forgot goes unnoticed until it is exec'd. And only those
that exec would start the same way: no preexec_fn, no user or group change, closed descriptors,
and the same interpreter settings from the environment (`PYTHON*`, and the locale LANG and LC_*
give at start) as the zygote's. A command under `rlimit_prefix` (other resource limits, as
prlimit(1) gives) is forked too, the fork taking those limits. Everything else, a command under
another prefix (the privilege drop of tests/faults.py, which only bounds what an exec keeps) among
them, is exec'd as before, as are the benchmark's servers and the wheel check of `.ci/run`.
`CCWEB_TESTS_START=exec` turns forking off for a whole run.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

START_ENV = "CCWEB_TESTS_START"

# What a server imports besides its own code: the modules whose import is the cost of a start. A
# missing or renamed one is only imported in the child, as it would be after exec.
PRELOAD = (
    "mcp",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
    "mcp.server.sse",
    "mcp.server.streamable_http",
    "mcp.server.streamable_http_manager",
    "starlette.applications",
    "starlette.middleware.cors",
    "starlette.responses",
    "starlette.routing",
    "sse_starlette",
    "uvicorn",
    "uvicorn.config",
    "uvicorn.main",
    "uvicorn.server",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.websockets.auto",
    "sqlite_utils",
    "sqlite_utils.migrations",
    "watchdog.events",
    "watchdog.observers",
    "watchdog.observers.inotify",
    "msgspec.json",
    "platformdirs",
    "click",
    "sqlite3",
)

# Variables an interpreter reads as it starts; a request that differs in them is exec'd, except in
# those the fork applies as a start would: PYTHONPATH (tests use it to install a sitecustomize),
# PYTHONUNBUFFERED and PYTHONDONTWRITEBYTECODE (a client that passes only a default environment, as
# the Inspector does, drops them), and LANG and LC_* where the locale applied at start is the same.
_AT_START = ("PYTHON",)
_PATH = "PYTHONPATH"
_UNBUFFERED, _NO_BYTECODE = "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"
_APPLIED = (_PATH, _UNBUFFERED, _NO_BYTECODE)
_RLIMITS = ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_DATA", "RLIMIT_STACK",
            "RLIMIT_CPU", "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_RSS", "RLIMIT_RTPRIO",
            "RLIMIT_SIGPENDING", "RLIMIT_LOCKS", "RLIMIT_RTTIME")  # fmt: skip
_MAX_FDS = 64
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _at_start(env: dict[str, str]) -> dict[str, str]:
    settings = {k: v for k, v in env.items() if k.startswith(_AT_START) and k not in _APPLIED}
    settings["LC_CTYPE"] = _ctype(env)
    return settings


def _coerced(env: dict[str, str]) -> dict[str, str]:
    """The environment an interpreter started with `env` has: under the C locale (no LC_ALL, LC_CTYPE
    or LANG naming another), it sets LC_CTYPE=C.UTF-8 itself (PEP 538) and runs in UTF-8."""
    chosen = env.get("LC_ALL") or env.get("LC_CTYPE") or env.get("LANG") or "C"
    if chosen in ("C", "POSIX") and not env.get("LC_ALL"):
        return {**env, "LC_CTYPE": "C.UTF-8"}
    return env


def _ctype(env: dict[str, str]) -> str:
    """The locale an interpreter started with `env` applies at start: LC_CTYPE's, which sets its
    streams' encoding and error handler. The other categories are only variables in its environment."""
    coerced = _coerced(env)
    return coerced.get("LC_ALL") or coerced.get("LC_CTYPE") or coerced.get("LANG") or "C"


# --- the test worker's side ----------------------------------------------------------------------


class Zygote:
    """One per test worker, started at its first request; serves one request at a time."""

    def __init__(self, command: str) -> None:
        import subprocess

        self._lock = threading.Lock()
        self._env = dict(os.environ)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self.proc = subprocess.Popen(  # kept: it ends when the worker closes its end of the socket
            [sys.executable, os.path.abspath(__file__), command, str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=self._env,
        )  # fmt: skip
        theirs.close()
        if self._sock.recv(64) != b"ready":
            raise ZygoteFailed("the zygote did not start")

    def can_start(self, env: dict[str, str]) -> bool:
        if env.get(_PATH) != self._env.get(_PATH) and (_PATH in self._env or "sitecustomize" in sys.modules):
            return False  # the zygote's path or sitecustomize would stand where the request's should
        return _at_start(env) == _at_start(self._env)

    def start(self, request: dict[str, Any], fds: list[int]) -> int:
        """The pid of a new process, the worker's child, that has become `request` with `fds` as its
        descriptors. Raises what exec would have raised (a missing directory, say) as OSError, and
        ZygoteFailed when the zygote cannot serve (then exec is used from now on)."""
        with self._lock:
            reply = self._ask(request, fds)
        if reply[0] == "error":  # the process could not become what was asked, and has exited
            _, pid, errno, strerror, filename = reply
            os.waitpid(pid, 0)
            raise OSError(errno, strerror, filename)
        if reply[0] != "ok":
            raise ZygoteFailed(f"the zygote could not start {request['argv'][:2]}: {reply[1]}")
        pid = int(reply[1])
        if _parent_of(pid) != os.getpid():  # then no wait() here would ever see it end
            os.kill(pid, signal.SIGKILL)
            raise ZygoteFailed(f"process {pid} did not become this worker's child")
        return pid

    def _ask(self, request: dict[str, Any], fds: list[int]) -> tuple[Any, ...]:
        """One request and its reply, with this worker a child subreaper meanwhile. Anything that
        interrupts the exchange (pytest-timeout's alarm, ^C) would leave a reply for the next
        request to read: the zygote is then given up."""
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise ZygoteFailed(f"prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}")
        try:
            self._sock.sendmsg([pickle.dumps(request)], _sent_fds(fds))
            reply: tuple[Any, ...] = pickle.loads(self._sock.recv(1 << 16))
        except BaseException as exc:
            self._sock.close()
            _give_up(f"a launch was interrupted ({type(exc).__name__})")
            raise
        finally:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, was.value, 0, 0, 0)
        return reply


class ZygoteFailed(OSError):
    """The zygote cannot start processes: exec them."""


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None  # no entry: not even a zombie waiting for its parent


_TESTS = os.path.dirname(os.path.realpath(__file__))


def _test_script(argv: list[str]) -> str | None:
    """The script of `python SCRIPT ARGS...` when it is one of the tests' own (the Python SDK client
    processes, the load test's and tests/test_http.py's client processes), run by this interpreter
    with no options: the zygote has imported most of what they import (the SDK). Else None."""
    if len(argv) < 2 or argv[0] != sys.executable or not os.path.isabs(argv[1]) or not argv[1].endswith(".py"):
        return None
    path = os.path.realpath(argv[1])
    if path == os.path.realpath(__file__):  # the zygote itself, started by `_zygote_for`
        return None
    return argv[1] if path.startswith(_TESTS + os.sep) and os.path.isfile(path) else None


def _refused_by_exec(argv: list[str], env: dict[str, str]) -> bool:
    """What exec refuses (a NUL in an argument or the environment, `=` in a name) is left to exec, so
    that the caller gets its error, not a process that dies."""
    texts = [*argv, *env, *env.values()]
    return any("\0" in text for text in texts) or any("=" in name for name in env)


def _status_field(name: str) -> str:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{name}:"):
                return line.split()[1]
    raise ZygoteFailed(f"no {name} in /proc/self/status")


def _umask() -> int:
    # Read, not set and reset: another thread of the worker may be creating a file right now.
    return int(_status_field("Umask"), 8)


def request_for(
    argv: list[str], env: dict[str, str], pass_fds: Any, cwd: Any, umask: int, session: bool, group: int
) -> dict[str, Any]:
    import resource

    return {
        "argv": argv,
        "targets": [0, 1, 2, *pass_fds],
        "env": env,
        "cwd": os.fsdecode(cwd) if cwd is not None else os.getcwd(),
        "umask": umask if umask >= 0 else _umask(),
        "session": session,
        "group": group,
        "rlimits": {name: resource.getrlimit(getattr(resource, name)) for name in _RLIMITS if hasattr(resource, name)},
        "cpus": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "ignored": _ignored_signals(),
    }


def _ignored_signals() -> list[int]:
    """The signals this process ignores, which exec would leave ignored in what it starts."""
    mask = int(_status_field("SigIgn"), 16)
    return [number for number in range(1, 65) if mask >> (number - 1) & 1]


_zygote: Zygote | None = None
_broken: str | None = None
# Every ccweb-index process this worker started, forked or exec'd: (pid, argv), newest last.
started: list[tuple[int, list[str]]] = []
# Those of them forked for a launcher (`launch_command`).
launched: list[tuple[int, list[str]]] = []
# The tests' own Python scripts this worker started forked (`_test_script`): (pid, argv).
scripts: list[tuple[int, list[str]]] = []


def _give_up(why: str) -> None:
    global _zygote, _broken
    _zygote, _broken = None, why
    print(f"tests/zygote.py: exec'ing ccweb-index from now on: {why}", file=sys.stderr)


_starting = threading.Lock()


def _zygote_for(command: str) -> Zygote | None:
    global _zygote
    with _starting:  # two threads' first launches must not start two
        if _broken is None and _zygote is None:
            try:
                _zygote = Zygote(command)
            except OSError as exc:  # ZygoteFailed, or the interpreter could not be started
                _give_up(str(exc))
        return _zygote


# Run as a prefix where nothing forks the command (exec'd, or with forking off); `install` reads the
# limits from its argument instead and has the fork take them.
_RLIMIT_CODE = (
    "import json, os, resource, sys\n"
    "for name, limits in json.loads(sys.argv[1]).items():\n"
    "    resource.setrlimit(getattr(resource, name), tuple(limits))\n"
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def rlimit_prefix(**limits: tuple[int, int]) -> tuple[str, ...]:
    """A command prefix that runs the rest with these resource limits, e.g.
    `rlimit_prefix(RLIMIT_FSIZE=(soft, hard))`; the others are the caller's."""
    return (sys.executable, "-c", _RLIMIT_CODE, json.dumps(limits))


def _without_rlimit_prefix(argv: list[str]) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """(the command, the limits) of a command under `rlimit_prefix`; else (argv, {})."""
    if argv[:3] != [sys.executable, "-c", _RLIMIT_CODE] or len(argv) < 5:
        return argv, {}
    return argv[4:], {name: (soft, hard) for name, (soft, hard) in json.loads(argv[3]).items()}


def install(command: str) -> None:
    """Fork launches of `command` through subprocess.Popen from this worker's zygote."""
    import subprocess

    exec_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    forking = os.environ.get(START_ENV, "fork") != "exec"

    def execute_child(self: Any, args: Any, executable: Any, preexec_fn: Any, close_fds: bool, pass_fds: Any,
                      cwd: Any, env: Any, startupinfo: Any, creationflags: Any, shell: bool,
                      p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                      restore_signals: bool, gid: Any, gids: Any, uid: Any, umask: int,
                      start_new_session: bool, process_group: int = -1) -> None:  # fmt: skip
        argv = [os.fsdecode(a) for a in args] if isinstance(args, (list, tuple)) else []
        # Under a prefix that execs it (prlimit, a setrlimit wrapper) it has the prefix's pid; the
        # zygote, which is given the command's path, is not one of them.
        ours = command in argv and os.path.abspath(__file__) not in argv  # nor the zygote, nor a launcher's client
        argv, limits = _without_rlimit_prefix(argv)
        script = _test_script(argv)
        if (argv[:1] == [command] or script is not None) and forking and executable is None and preexec_fn is None \
                and close_fds and not shell and gid is None and gids is None and uid is None:  # fmt: skip
            environment = {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
            zygote = _zygote_for(command)
            if zygote is not None and zygote.can_start(environment) and not _refused_by_exec(argv, environment):
                fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                       errwrite if errwrite != -1 else 2, *pass_fds]  # fmt: skip
                request = request_for(argv, environment, pass_fds, cwd, umask, start_new_session, process_group)
                request["rlimits"].update(limits)
                request["script"] = script
                try:
                    self.pid = zygote.start(request, fds)
                except ZygoteFailed as exc:
                    _give_up(str(exc))
                else:
                    self._child_created = True
                    self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
                    (started if script is None else scripts).append((self.pid, request["argv"]))
                    return
        exec_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                   shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids,
                   uid, umask, start_new_session, process_group)  # fmt: skip
        if ours:
            started.append((self.pid, argv))

    subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]


# --- launches by other processes: the interop clients, the load test's client processes -----------
# A client that starts its own server (the TypeScript SDK, the Inspector, a Python client process) is
# given `launch_command()`: a small interpreter (-I -S: no site, no imports beyond the standard
# library's core) that hands its standard descriptors and its process state to this worker over a
# socket, and waits. The worker has the zygote fork the server, as for its own launches, then tells
# the launcher how the server ended; the launcher ends the same way. Signals the client sends the
# launcher are passed on; if the launcher is killed, so is the server. Whatever the zygote would not
# start as exec would (a different interpreter setting, forking turned off, no worker listening), the
# launcher execs the real command in its own place.

_FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
_listeners: dict[str, str | None] = {}  # command -> the socket this worker listens on for its launches


def launch_command(command: str) -> list[str]:
    """A command line that any process of this user can run, with `command`'s arguments appended, to
    start `command` forked by this worker's zygote (or exec'd where it would not be)."""
    if os.environ.get(START_ENV, "fork") == "exec":
        return [command]
    with _starting:
        if command not in _listeners:
            try:
                _listeners[command] = _listen(command)
            except OSError as exc:  # a socket path too long for AF_UNIX (a long TMPDIR), say
                print(f"tests/zygote.py: client processes exec ccweb-index: {exc}", file=sys.stderr)
                _listeners[command] = None
    listener = _listeners[command]
    return [command] if listener is None else [sys.executable, "-I", "-S", os.path.abspath(__file__), "launch", listener, command]


def _listen(command: str) -> str:
    import atexit
    import shutil
    import tempfile

    where = tempfile.mkdtemp(prefix="ccweb-launch-")  # 0700: no other user reaches the socket
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    path = os.path.join(where, "socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # out of descriptors, say: a launcher waiting meanwhile is served after
                time.sleep(0.1)
                continue
            threading.Thread(target=_serve_launch, args=(conn, command), name="zygote-launch", daemon=True).start()

    threading.Thread(target=accept, name="zygote-launches", daemon=True).start()
    return path


def _serve_launch(conn: socket.socket, command: str) -> None:
    """One launcher's request: fork its server, tell it the pid, then how the server ended."""
    with conn:
        pid = _start_for_launcher(conn, command)
        try:
            if pid is None:
                conn.send(pickle.dumps(("exec",)))
                return
            conn.send(pickle.dumps(("ok", pid)))
        except OSError:
            pass  # the launcher is gone: the server goes too, below
        status = _wait_or_kill(pid, conn)
        try:
            conn.send(pickle.dumps(("exit", status)))
        except OSError:
            pass  # it was killed: nobody to tell


def _start_for_launcher(conn: socket.socket, command: str) -> int | None:
    """The forked server's pid, or None where the launcher must exec."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", creds)[1] != os.getuid():
        return None
    message, ancillary, _flags, _addr = conn.recvmsg(
        1 << 20, socket.CMSG_SPACE(3 * struct.calcsize("i")), socket.MSG_CMSG_CLOEXEC
    )
    fds = _received_fds(ancillary)
    try:
        request = pickle.loads(message)
        argv, env = request["argv"], request["env"]
        zygote = _zygote_for(command)
        if zygote is None or len(fds) != 3 or argv[:1] != [command]:
            return None
        if not zygote.can_start(env) or _refused_by_exec(argv, env):
            return None
        try:
            pid = zygote.start(request, fds)
        except ZygoteFailed as exc:
            _give_up(str(exc))
            return None
        except OSError:
            return None  # exec, in the launcher, says it as exec says it
        started.append((pid, argv))
        launched.append((pid, argv))
        return pid
    finally:
        for fd in fds:
            os.close(fd)  # else the client would never see the server's stdout end


def _sent_fds(fds: list[int]) -> list[tuple[int, int, bytes]]:
    """The ancillary data that passes `fds` along with a message (`_received_fds` reads it)."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    return fds


def _wait_or_kill(pid: int, conn: socket.socket) -> int:
    """The server's wait status. Meanwhile the signals its launcher passes on are sent to it, and it
    is killed if the launcher goes (the launcher was killed: a signal it could not pass on)."""
    import select

    try:
        watched = os.pidfd_open(pid)
    except OSError:  # a kernel without pidfds: the server is waited for, launcher or not
        return os.waitpid(pid, 0)[1]
    poller = select.poll()
    poller.register(watched, select.POLLIN)
    poller.register(conn, select.POLLIN)
    try:
        while watched not in {fd for fd, _ in poller.poll()}:
            try:
                message = conn.recv(64)
            except OSError:
                message = b""
            number = struct.unpack("i", message)[0] if len(message) == 4 else signal.SIGKILL
            try:
                signal.pidfd_send_signal(watched, number)  # not yet reaped: still this server
            except ProcessLookupError:
                pass
            if not message:
                break
    finally:
        os.close(watched)
    return os.waitpid(pid, 0)[1]


def _launch(path: str, argv: list[str]) -> None:
    """The launcher: become `argv` through the worker at `path`, or exec it."""
    request = request_for(argv, dict(os.environ), [], None, -1, True, -1)
    # Held until they can be passed on: a signal meanwhile reaches the server, not the launcher alone.
    # All of them, even those the launcher inherited ignored: the server's own dispositions decide
    # (it takes SIGTERM whatever it inherited, as an exec'd one does).
    forwarded = {getattr(signal, name) for name in _FORWARDED}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        conn.sendmsg([pickle.dumps(request)], _sent_fds([0, 1, 2]))
        reply = pickle.loads(conn.recv(1 << 16))
    except (OSError, EOFError, pickle.UnpicklingError):
        reply = ("exec",)
    if reply[0] != "ok":
        conn.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.execv(argv[0], argv)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the server's now: its client sees them end when the server ends
        os.dup2(null, fd)

    def pass_on(number: int, _frame: Any) -> None:
        # Through the worker, which signals the server by its pidfd until it has reaped it: a pid
        # this process used could by then be another process's.
        try:
            conn.send(struct.pack("i", number))
        except OSError:
            pass  # the worker is gone

    for number in forwarded:
        signal.signal(number, pass_on)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    message = conn.recv(1 << 16)
    _end_as(pickle.loads(message)[1] if message else 255 << 8)  # no message: the worker is gone


def _end_as(status: int) -> None:
    """Exit as a process that ended with wait status `status` (the launcher's server) did."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])  # the client may have blocked it
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # not delivered: as a shell reports it
    os._exit(os.waitstatus_to_exitcode(status))


# --- the zygote's side ---------------------------------------------------------------------------


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _serve(sock: socket.socket) -> dict[str, Any]:
    """Fork for each request. Returns only in a forked process that has become what exec would have
    started (`_become_process`) and said so, with its request."""
    space = socket.CMSG_SPACE(_MAX_FDS * struct.calcsize("i"))
    while True:
        message, ancillary, _flags, _addr = sock.recvmsg(1 << 20, space)
        if not message:
            os._exit(0)  # the worker is gone
        fds = _received_fds(ancillary)
        request = pickle.loads(message)
        reply = _fork_twice(request, fds, sock)
        if reply is None:
            return request
        for fd in fds:
            os.close(fd)
        try:
            sock.send(reply)
        except OSError:
            os._exit(0)  # the worker gave up on this zygote (an interrupted launch) or is gone


def _fork_twice(request: dict[str, Any], fds: list[int], sock: socket.socket) -> bytes | None:
    """In the zygote, the reply for the worker, once the new process is the worker's child and has
    become what was asked, or failed to (as exec would: it then exits, and the reply says why). In the
    new process, None. The middle process only forks and exits."""
    read_end, write_end = os.pipe()
    try:
        middle = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return pickle.dumps(("failed", f"fork: {exc}"))
    if middle == 0:
        os.close(read_end)
        if os.fork() != 0:
            os._exit(0)
        sock.close()
        report = _become_process(request, fds, write_end)  # exits if it cannot
        os.write(report, pickle.dumps(("ok", os.getpid())))
        os.close(report)
        return None
    os.close(write_end)
    os.waitpid(middle, 0)  # once it is gone, the new process is the worker's child
    reply = b""
    while chunk := os.read(read_end, 65536):  # until the new process closes its end, or dies
        reply += chunk
    os.close(read_end)
    return reply or pickle.dumps(("failed", "the new process died before it could report"))


def _become_process(request: dict[str, Any], fds: list[int], report_fd: int) -> int:
    """What exec'ing `request["argv"]` would have made of this process, in the order a launch does it
    (descriptors, directory, umask, session, signals): the number its report goes to. A failure is
    reported as exec's would be, and the process exits."""
    import fcntl
    import resource

    targets = request["targets"]
    report = fcntl.fcntl(report_fd, fcntl.F_DUPFD, max(targets) + 1)
    os.close(report_fd)
    try:
        _place(fds, targets, keep=report)
        os.environ.clear()
        os.environ.update(_coerced(request["env"]))
        time.tzset()  # the C library read TZ when the zygote started
        try:
            os.chdir(request["cwd"])
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, request["cwd"]) from None
        os.umask(request["umask"])
        if request["session"]:
            os.setsid()
        elif request["group"] >= 0:
            os.setpgid(0, request["group"])
        for name, limits in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), limits)
        os.sched_setaffinity(0, request["cpus"])
        os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
        _signals(request["ignored"])
        signal.pthread_sigmask(signal.SIG_SETMASK, request["sigmask"])
    except OSError as exc:
        os.write(report, pickle.dumps(("error", os.getpid(), exc.errno, exc.strerror, exc.filename)))
        os._exit(255)
    return report


def _signals(ignored: list[int]) -> None:
    """The dispositions a new interpreter has: what its launcher ignored stays ignored (exec keeps
    SIG_IGN); SIGPIPE and SIGXFSZ are ignored and SIGINT raises KeyboardInterrupt, as Python sets them
    at start; everything else is the default."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if number in (signal.SIGPIPE, signal.SIGXFSZ) or number in ignored:
            signal.signal(number, signal.SIG_IGN)
        elif number == signal.SIGINT:
            signal.signal(number, signal.default_int_handler)
        else:
            signal.signal(number, signal.SIG_DFL)


def _place(fds: list[int], targets: list[int], keep: int) -> None:
    """Descriptor `fds[i]` on number `targets[i]`, and `keep`; every other descriptor closed, as exec
    with close_fds."""
    import fcntl

    above = max(targets) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target)  # inheritable, as a launched process's descriptors are
    kept = {*targets, keep}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in kept:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor


def _standard_streams(unbuffered: bool) -> None:
    """New sys.stdin, stdout and stderr on descriptors 0-2, made as the interpreter makes them at start
    (a terminal or not decides line buffering; PYTHONUNBUFFERED leaves stdin buffered); the zygote's,
    on its own 0-2, are let go. Encoding and error handler are the zygote's: `can_start` saw to it
    that the request's locale is the same."""
    import io

    def stream(fd: int, name: str, like: Any) -> io.TextIOWrapper:
        # CPython's create_stdio: unbuffered writes go straight to the raw file (the text layer
        # writes through); else buffered as open() buffers (st_blksize).
        mode = "wb" if fd != 0 else "rb"
        buffering = 0 if unbuffered and fd != 0 else -1
        buffer: Any = open(fd, mode, buffering=buffering, closefd=False)
        raw = buffer if buffering == 0 else buffer.raw
        raw.name = f"<{name}>"
        line = not unbuffered and (raw.isatty() or fd == 2)
        text = io.TextIOWrapper(buffer, encoding=like.encoding, errors=like.errors, newline="\n",
                                line_buffering=line, write_through=unbuffered)  # fmt: skip
        text.mode = mode[0]
        return text

    sys.stdin = sys.__stdin__ = stream(0, "stdin", sys.__stdin__)
    sys.stdout = sys.__stdout__ = stream(1, "stdout", sys.__stdout__)
    sys.stderr = sys.__stderr__ = stream(2, "stderr", sys.__stderr__)


def _become_interpreter(request: dict[str, Any]) -> None:
    """What is left of a start once the process is the launched one: the interpreter's own state."""
    import random

    random.seed()
    env = request["env"]
    _standard_streams(unbuffered=bool(env.get(_UNBUFFERED)))
    sys.dont_write_bytecode = bool(env.get(_NO_BYTECODE))
    script = request.get("script")
    sys.argv = list(request["argv"][1:] if script is not None else request["argv"])
    if script is not None:  # `python SCRIPT`: the script's own directory first on the path
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    _python_path(request["env"].get(_PATH))


def _python_path(value: str | None) -> None:
    """What PYTHONPATH does at a start: its directories after the script's, then `site` imports a
    sitecustomize from them (`can_start`: the zygote started without PYTHONPATH or a sitecustomize)."""
    if not value:
        return
    sys.path[1:1] = [os.path.abspath(entry) for entry in value.split(os.pathsep) if entry]
    if "sitecustomize" not in sys.modules:
        try:
            import sitecustomize  # noqa: F401
        except ImportError:
            pass


def _run_script(path: str) -> None:
    """`python SCRIPT`, in this process: the script's code in a new `__main__` module with the globals
    CPython gives a script (its loader, `__file__`, `__cached__`, the `builtins` module), which stays
    `sys.modules["__main__"]` for its threads and atexit handlers (runpy's would be put back). As in
    CPython (pythonrun.c), `__file__` and `__cached__` are dropped once the code has run, unless it
    exits from inside (SystemExit)."""
    import builtins
    import importlib.machinery
    import io
    import types

    module = types.ModuleType("__main__")
    loader = importlib.machinery.SourceFileLoader("__main__", path)
    module.__dict__.update(__file__=path, __cached__=None, __loader__=loader, __builtins__=builtins)
    sys.modules["__main__"] = module
    with io.open_code(path) as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)  # not this module's __future__
    exiting = False
    try:
        exec(code, module.__dict__)
    except SystemExit:
        exiting = True
        raise
    finally:
        if not exiting:  # popped: the script may have deleted them itself
            module.__dict__.pop("__file__", None)
            module.__dict__.pop("__cached__", None)


def main() -> None:
    if sys.argv[1] == "launch":
        _launch(sys.argv[2], sys.argv[3:])
    command, fd = sys.argv[1], int(sys.argv[2])
    # As for the console script: its own directory first on the path, not this one's.
    sys.path[0] = os.path.dirname(os.path.realpath(command))
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the test run is the worker's to handle
    _preload()
    if threading.active_count() != 1:
        sock.send(b"a preloaded module started a thread")
        os._exit(1)
    # Every fork would otherwise copy the preloaded heap page by page when it ends: the interpreter's
    # last collections and its modules' teardown write to every object. Frozen, the collector never
    # looks at them (measured: a forked child's exit went from 0.34 to 0.05 CPU-s, 150 children a run).
    gc.freeze()
    sock.send(b"ready")
    request = _serve(sock)
    _become_interpreter(request)
    if request.get("script") is not None:
        _run_script(request["script"])
        return
    from ccweb_index.__main__ import main as cli_main

    sys.argv[0] = sys.argv[0].removesuffix(".exe")
    sys.exit(cli_main())


if __name__ == "__main__":
    main()
