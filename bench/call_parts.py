"""Parts of a conversations call, in-process: the freshness proof, the answer's text, and the
whole call back to back against the same call after an idle gap.

    python -m bench.call_parts SESSIONS_DIR --db INDEX

Starts `Service(..., watch=True)` on an existing index, answers `children_hot` once, then times, best
of 5 runs of 3,000: the watcher's cookie round trip, the check that makes it unnecessary when nothing
is pending (`InotifyWatcher.drained`), and the answer's JSON text by `json.dumps` and by the service
(`ToolResult.text`). Wall time and the calling thread's CPU time (the reader thread's is not in it),
in microseconds. SESSIONS_DIR needs its bench.gen_corpus `<dir>.summary.json` beside it.

Then the whole call (`Service.call` and the answer's text), and the answer's `json.dumps` as a
control that holds no product code, each timed once back to back and once with the thread asleep
for IDLE_GAP_S before every call, as a stdio server is between an agent's calls: the median of the
caller's CPU time, on one CPU. What a call costs inside a server, beyond what it costs in a loop,
is mostly this (docs/benchmarks.md, "fourth look").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path


def best_of(fn: Callable[[], object], calls: int = 3000, runs: int = 5) -> tuple[float, float]:
    """(wall, thread CPU) microseconds per call, of the run with the least wall time."""
    for _ in range(100):
        fn()
    results = []
    for _ in range(runs):
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(calls):
            fn()
        results.append(((time.perf_counter_ns() - wall) / calls / 1000, (time.thread_time_ns() - cpu) / calls / 1000))
    return min(results)


# About the time a server waits between two calls of bench.stdio_calls (the canned server's round trip,
# docs/benchmarks.md): long enough for its CPU to go idle.
IDLE_GAP_S = 0.0015


def median_cpu(fn: Callable[[], object], gap: float, calls: int = 2000) -> float:
    """The median of the calling thread's CPU time per call, in microseconds, with `gap` s of sleep
    before each call (0: back to back)."""
    times = []
    for _ in range(calls):
        if gap:
            time.sleep(gap)
        cpu = time.thread_time_ns()
        fn()
        times.append(time.thread_time_ns() - cpu)
    return statistics.median(times) / 1000


def main(argv: list[str] | None = None) -> int:
    from ccweb_index.indexer.watch import InotifyWatcher
    from ccweb_index.server.service import Service

    ap = argparse.ArgumentParser(prog="python -m bench.call_parts", description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions_dir")
    ap.add_argument("--db", required=True)
    args = ap.parse_args(argv)
    summary = json.loads(Path(f"{os.path.normpath(args.sessions_dir)}.summary.json").read_text())
    service = Service(args.sessions_dir, args.db, watch=True)
    service.start()
    try:
        watcher = service.watcher
        if not isinstance(watcher, InotifyWatcher):
            sys.exit("no inotify watcher here: nothing to compare")
        result = service.call("ccweb_list_conversations", {"scope": "children"}, summary["hot_source"])
        parts = {
            "cookie round trip": watcher._cookie_round_trip,
            "drained check (no cookie)": watcher.drained,
            "answer text, json.dumps": lambda: json.dumps(result.payload, ensure_ascii=False, separators=(",", ":")),
            "answer text, ToolResult.text": result.text,
        }
        for name, fn in parts.items():
            wall, cpu = best_of(fn)
            print(f"{name:32s} wall {wall:7.1f} us   caller CPU {cpu:7.1f} us")
        # One CPU, so that a sleeping thread wakes where it ran (not to a CPU whose caches hold other work).
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        whole = {
            "whole call, children_hot": lambda: service.call(
                "ccweb_list_conversations", {"scope": "children"}, summary["hot_source"]
            ).text(),
            "control: answer's json.dumps": parts["answer text, json.dumps"],
        }
        for name, fn in whole.items():
            median_cpu(fn, 0, calls=200)  # warm-up
            hot, idle = median_cpu(fn, 0), median_cpu(fn, IDLE_GAP_S)
            print(f"{name:32s} caller CPU p50: back to back {hot:7.1f} us, after {IDLE_GAP_S * 1000:g} ms idle {idle:7.1f} us ({idle / hot:.2f}x)")
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
