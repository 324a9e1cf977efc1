"""How fast `ccweb-index serve` starts: spawn -> `initialize` answered, and -> `tools/list` answered.

    python -m bench.initialize --sessions-dir DIR [--rounds 40] [--cold-rounds 5] [--warmup-rounds 1] [--compare OTHER] [--json OUT]

An MCP client (Codex, Claude Code) spawns the stdio server and starts its first turn about a second
later, ready or not (issue 8); what counts is when the server has answered `initialize` and
`tools/list`. Each round spawns the server, writes `initialize` at once (the pipe holds it until the
server reads), then `notifications/initialized` and `tools/list` when `initialize` is answered, and
records both times from just before the spawn. The floor is `bench.empty_server`, the same SDK's
low-level `Server` with one tool: it cannot start faster than its imports. Product and floor rounds
alternate, so load from elsewhere on the machine hits both alike.

- warm: the index exists (built once before the rounds); the server still checks every file's
  signature and starts the watcher, in the background, while it answers.
- cold: no index; the server builds it from scratch in the background (and is stopped mid-build).

Raw JSON-RPC over pipes, no client library: the time measured is the server's, not a client's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, ccweb_index_command, clean_env, percentile

PROTOCOL = "2025-06-18"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
# A start slower than this is a failure of the round, not a measurement.
ROUND_TIMEOUT_SECONDS = 30.0


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _await_answer(proc: subprocess.Popen[bytes], buffer: bytearray, want_id: int, deadline: float) -> float:
    """Read stdout until the answer with `want_id` arrives; the perf_counter time it did."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            if line.strip() and json.loads(line).get("id") == want_id:
                return time.perf_counter()
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError(f"no answer to request {want_id} in {ROUND_TIMEOUT_SECONDS} s")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"the server exited (status {proc.wait()}) before answering request {want_id}")
        buffer += chunk


def one_round(command: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float]:
    """(seconds to `initialize` answered, seconds to `tools/list` answered), both from the spawn."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    assert proc.stdin is not None
    try:
        proc.stdin.write(_line(INITIALIZE))
        proc.stdin.flush()
        buffer = bytearray()
        deadline = started + ROUND_TIMEOUT_SECONDS
        initialized = _await_answer(proc, buffer, 1, deadline)
        proc.stdin.write(_line(INITIALIZED) + _line(TOOLS_LIST))
        proc.stdin.flush()
        listed = _await_answer(proc, buffer, 2, deadline)
        return initialized - started, listed - started
    finally:
        proc.stdin.close()  # end of input: the server exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "rounds": len(ordered),
        "p50_s": percentile(ordered, 50),
        "p95_s": percentile(ordered, 95),
        "min_s": ordered[0],
        "max_s": ordered[-1],
    }


def measure(
    sessions_dir: str, rounds: int, cold_rounds: int, work: Path, compare: str | None = None, warmup_rounds: int = 1
) -> dict[str, Any]:
    """`compare`: another `ccweb-index` (e.g. an older version's), timed warm in the same rounds.
    `warmup_rounds`: uncounted starts of the floor and the product first (they warm the page cache)."""
    product = [ccweb_index_command(), "serve", "--sessions-dir", sessions_dir, "--db"]
    floor = [sys.executable, "-m", "bench.empty_server"]
    env = clean_env(CCWEB_SOURCE_SESSION_ID="bench-source")
    warm_db = work / "warm.sqlite"
    built = time.perf_counter()
    subprocess.run([ccweb_index_command(), "build", "--sessions-dir", sessions_dir, "--db", str(warm_db)],
                   env=env, check=True, stderr=subprocess.DEVNULL)  # fmt: skip
    build_s = time.perf_counter() - built
    times: dict[str, list[tuple[float, float]]] = {"floor": [], "warm": [], "cold": [], "compare_warm": []}
    for _ in range(warmup_rounds):  # the first starts of all warm the page cache; not counted
        one_round(floor, clean_env(), str(REPO))
        one_round([*product, str(warm_db)], env)
    for n in range(rounds):
        times["floor"].append(one_round(floor, clean_env(), str(REPO)))
        times["warm"].append(one_round([*product, str(warm_db)], env))
        if n < cold_rounds:
            times["cold"].append(one_round([*product, str(work / f"cold-{n}.sqlite")], env))
        if compare:
            times["compare_warm"].append(one_round([compare, *product[1:], str(warm_db)], env))
    result: dict[str, Any] = {"warm_build_s": build_s}
    for name, pairs in times.items():
        if pairs:
            result[name] = {"initialize": summary([p[0] for p in pairs]), "tools_list": summary([p[1] for p in pairs])}
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.initialize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions-dir", required=True, help="a corpus (bench.gen_corpus); 10,000 sessions for the issue's target")
    ap.add_argument("--rounds", type=int, default=40, help="product (warm index) and floor starts, interleaved")
    ap.add_argument("--cold-rounds", type=int, default=5, help="starts without an index (each builds in the background)")
    ap.add_argument("--compare", help="another ccweb-index executable to time warm in the same rounds (before/after)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="uncounted starts of each first (0: none, for a smoke test)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ccweb-bench-init-") as work:
        result = measure(args.sessions_dir, args.rounds, args.cold_rounds, Path(work), args.compare, args.warmup_rounds)
    result["compare"] = args.compare
    result["machine"] = {"cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                         "loadavg": os.getloadavg()}  # fmt: skip
    result["sessions_dir"] = args.sessions_dir
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
