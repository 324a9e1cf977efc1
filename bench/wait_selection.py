"""What deciding a wait costs: `queries.selected_changes` for scope "descendants" over windows of the
change log on a 10,000-conversation index with a 2,000-conversation tree (a manager of 500 workers,
20 managers of 1,479 more), a status filter, as a wait for finished workers asks.

    python -m bench.wait_selection [--runs 5]

Prints, per window, the median wall time of one decision (one replay of the tree: the change hub
shares it among the waits on that tree in one look). The index is the `sessions` columns the
decision reads, with the index the product has on them, in memory.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time

from ccweb_index.server.queries import Change, Facts, selected_changes
from ccweb_index.server.tools import ConversationsRequest

SOURCE = "s"


def _state() -> dict[str, Facts]:
    state = {SOURCE: Facts(None, None, "claude", "running"), "m": Facts("mcp", SOURCE, "claude", "running")}
    state |= {f"w{i}": Facts("mcp", "m", "claude", "running") for i in range(500)}
    state |= {f"c{i}": Facts("mcp", SOURCE, "claude", "running") for i in range(20)}
    state |= {f"g{i}": Facts("mcp", f"c{i % 20}", "claude", "running") for i in range(1479)}
    state |= {f"o{i}": Facts(None, None, "claude", "running") for i in range(8000)}
    state["other"] = Facts(None, None, "claude", "running")
    return state


def _index(state: dict[str, Facts | None]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, good INTEGER, created_from_kind TEXT, "
                 "created_from_source TEXT, agent_key TEXT, status TEXT, updated_at_ms INTEGER DEFAULT 0)")  # fmt: skip
    conn.execute("CREATE INDEX sessions_by_source ON sessions (created_from_source, created_from_kind, "
                 "updated_at_ms DESC, id) WHERE good = 1")  # fmt: skip
    conn.executemany("INSERT INTO sessions (id, good, created_from_kind, created_from_source, agent_key, status) "
                     "VALUES (?, 1, ?, ?, ?, ?)", [(sid, *f) for sid, f in state.items() if f is not None])  # fmt: skip
    return conn


def _windows(state: dict[str, Facts]) -> dict[str, tuple[list[Change], dict[str, Facts | None]]]:
    """Name -> (the window's changes, the index after them)."""
    inside, outside = state["m"], Facts("mcp", "other", "claude", "running")
    idle = [Change(i + 1, f"w{i}", state[f"w{i}"], state[f"w{i}"]._replace(status="done")) for i in range(500)]
    back_and_forth = [Change(501 + k, "m", *((inside, outside) if k % 2 == 0 else (outside, inside))) for k in range(100)]
    created = {f"n{i}": Facts("mcp", "m", "claude", "running") for i in range(2000)}
    after_idle = {**state, **{c.session_id: c.after for c in idle}}
    return {
        "the manager of 500 moves out": ([Change(1, "m", inside, outside)], {**state, "m": outside}),
        "500 workers finish": (idle, after_idle),
        "500 workers finish, their manager out and back 50 times": (idle + back_and_forth, after_idle),
        "2,000 workers created": ([Change(i + 1, sid, None, f) for i, (sid, f) in enumerate(created.items())], {**state, **created}),
        "the source's own parent changes": ([Change(1, SOURCE, state[SOURCE], outside)], {**state, SOURCE: outside}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.wait_selection", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    request = ConversationsRequest("descendants", SOURCE, 100, None, "done", None)
    for name, (changes, final) in _windows(_state()).items():
        conn = _index(final)
        times, reported = [], 0
        for _ in range(args.runs):
            started = time.perf_counter()
            reported = len(selected_changes(conn, changes, request))
            times.append(time.perf_counter() - started)
        print(f"{name:58s} {len(changes):5d} changes  {statistics.median(times) * 1000:8.1f} ms  ({reported} reported)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
