"""A call taken apart inside a `ccweb-index serve` that `bench.stdio_calls` starts (a diagnostic).

    PYTHONPATH=bench/call_ablation BENCH_ABLATE=fresh,position python -m bench.stdio_calls CORPUS --db INDEX
    PYTHONPATH=bench/call_ablation BENCH_PART_TIMES=/tmp/parts python -m bench.stdio_calls CORPUS --db INDEX

Python imports this module at start in every process that has the folder on its path; it acts only
in `ccweb-index serve`, so the client, the floor and the canned server run as they always do.

`BENCH_ABLATE` skips parts of each call by giving, from the second call on, what the part gave the
first time. On a corpus nothing writes the answers stay the same (bench.stdio_calls checks the
canned server's answer against the product's), while the part's work is gone from the call:
- `fresh`: the freshness proof of a conversations call (`IndexAnswers._make_fresh`);
- `position`: the change position's query;
- `rows`: the rows' query, and the rows as Python objects;
- `answer`: the answer built from the rows (its dicts, times, cursor and change token);
- `call`: the whole handler, as if the answer were kept (the product process's own floor).

`BENCH_PART_TIMES=PREFIX` writes, when the server exits, each part's calls and its mean thread CPU
and wall time per call, to `PREFIX.<pid>`. Each part is timed with what it calls, so parts nest; a
part an ablation skips is counted only when it really runs.

Neither is for the product: the ablations make answers stale. docs/benchmarks.md ("fifth look").
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _is_product_server() -> bool:
    # sys.argv, not /proc's command line: the test suite forks its servers from a preloaded
    # interpreter (tests/zygote.py), whose command line /proc keeps showing.
    return any(word.endswith("ccweb-index") for word in sys.argv) and "serve" in sys.argv


def _first_answer(owner: Any, name: str, key: Callable[..., str]) -> None:
    """`owner.name` gives, for each key of its arguments, what it gave the first time."""
    real = getattr(owner, name)
    kept: dict[str, Any] = {}

    def given_again(*args: Any, **kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        if k not in kept:
            kept[k] = real(*args, **kwargs)
        return kept[k]

    setattr(owner, name, given_again)


PARTS = ("fresh", "position", "rows", "answer", "call")


def _parts_to_skip() -> set[str]:
    """BENCH_ABLATE's parts. A misspelt one would measure the product as it is under the ablation's
    name, so it stops the server before anything else is set up."""
    parts = set(filter(None, os.environ.get("BENCH_ABLATE", "").split(",")))
    if unknown := parts - set(PARTS):
        sys.stderr.write(f"BENCH_ABLATE: no part named {', '.join(sorted(unknown))} (parts: {', '.join(PARTS)})\n")
        sys.stderr.flush()
        os._exit(2)  # a SystemExit while `site` imports this module is a fatal error with a traceback
    return parts


def _ablate(parts: set[str]) -> None:
    from ccweb_index.server import app, from_index, queries

    if "fresh" in parts:
        from_index.IndexAnswers._make_fresh = lambda self: True  # type: ignore[method-assign]
    if "position" in parts:
        _first_answer(queries, "change_position", lambda conn: "")
    if "rows" in parts:
        _first_answer(queries, "conversations", lambda conn, request, limit: repr((request, limit)))
    if "answer" in parts:
        _first_answer(from_index, "conversations_answer", lambda request, rows, position: repr(request))
    if "call" in parts:
        _first_answer(app, "guarded_call", lambda service, name, arguments, source: repr((name, arguments, source)))


_TIMED = (
    ("mcp.server.runner", "ServerRunner._on_request"),
    ("ccweb_index.server.app", "guarded_call"),
    ("ccweb_index.server.app", "to_call_result"),
    ("ccweb_index.server.service", "conversations_request"),
    ("ccweb_index.server.service", "inputs_request"),
    ("ccweb_index.server.from_index", "IndexAnswers.conversations"),
    ("ccweb_index.server.from_index", "IndexAnswers.inputs"),
    ("ccweb_index.server.from_index", "IndexAnswers._make_fresh"),
    ("ccweb_index.server.from_index", "IndexAnswers._seen_for"),
    ("ccweb_index.server.from_index", "conversations_answer"),
    ("ccweb_index.server.from_index", "user_inputs_answer"),
    ("ccweb_index.indexer.refresh", "Indexer.ready"),
    ("ccweb_index.indexer.refresh", "Indexer.refresh"),
    ("ccweb_index.server.queries", "change_position"),
    ("ccweb_index.server.queries", "conversations"),
    ("ccweb_index.server.queries", "session_state"),
    ("ccweb_index.server.queries", "newest_inputs"),
    ("ccweb_index.server.tools", "encode_change_token"),
    ("ccweb_index.server.cursor", "encode"),
)


def _timed(fn: Callable[..., Any], totals: list[int]) -> Callable[..., Any]:
    """`fn`, adding to `totals` (calls, thread CPU ns, wall ns) at every call."""

    def add(cpu: int, wall: int) -> None:
        totals[0] += 1
        totals[1] += time.thread_time_ns() - cpu
        totals[2] += time.perf_counter_ns() - wall

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                add(cpu, wall)

        return timed_async

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            add(cpu, wall)

    return timed


def _time_parts(prefix: str) -> None:
    import importlib

    totals: dict[str, list[int]] = {}
    for module_name, qualified in _TIMED:
        owner: Any = importlib.import_module(module_name)
        *path, name = qualified.split(".")
        for step in path:
            owner = getattr(owner, step)
        totals[qualified] = [0, 0, 0]
        setattr(owner, name, _timed(getattr(owner, name), totals[qualified]))

    def write() -> None:
        with open(f"{prefix}.{os.getpid()}", "w") as out:
            for qualified, (calls, cpu, wall) in sorted(totals.items(), key=lambda item: -item[1][1]):
                if calls:
                    per_call = f"CPU {cpu / calls / 1e3:7.1f} us  wall {wall / calls / 1e3:7.1f} us"
                    out.write(f"{qualified:34s} {calls:7d} calls  {per_call}\n")

    atexit.register(write)
    # A stdio server stopped by SIGTERM leaves through os._exit (server.stop), past atexit.
    leave = os._exit

    def written_then_leave(code: int) -> None:
        write()
        leave(code)

    os._exit = written_then_leave  # type: ignore[assignment]


if _is_product_server():
    skipped = _parts_to_skip()
    # Timed first: a part skipped by an ablation is then timed only when it really runs.
    if os.environ.get("BENCH_PART_TIMES"):
        _time_parts(os.environ["BENCH_PART_TIMES"])
    _ablate(skipped)
