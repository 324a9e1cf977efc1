"""The rescan-per-call baseline: answer a children lookup the way the original cc-web tool does.

    python -m bench.rescan SESSIONS_DIR --source ID [--calls 3] [--limit 20]

Per call: list the directory, lstat every session file, read and decode each regular one with the
indexer's own decoder (`indexer.sessionfile.parse_session`), keep those created from the source
through MCP, sort newest `updatedAt` first (then id), and build the answer rows. No state is kept
between calls. Prints one JSON object: each call's seconds, the median, and the ids answered.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from typing import Any

from ccweb_index.indexer.sessionfile import Unreadable, format_time, parse_session, session_id_from_name


def children_by_rescan(sessions_dir: str, source: str, limit: int) -> dict[str, Any]:
    found: list[tuple[int, str, dict[str, Any]]] = []
    for name in os.listdir(sessions_dir):
        session_id = session_id_from_name(name)
        if session_id is None:
            continue
        path = os.path.join(sessions_dir, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            with open(path, "rb", buffering=0) as f:
                data = f.read()
            parsed = parse_session(data)
        except (OSError, Unreadable):
            continue
        if parsed.created_from_kind != "mcp" or parsed.created_from_source != source:
            continue
        updated = parsed.updated_at_ms if parsed.updated_at_ms is not None else st.st_mtime_ns // 1_000_000
        row = {
            "conversationId": session_id,
            "title": parsed.title,
            "agent": parsed.agent,
            "status": parsed.status,
            "createdAt": format_time(parsed.created_at_ms),
            "updatedAt": format_time(updated),
            "createdFromKind": parsed.created_from_kind,
            "userInputCount": len(parsed.user_inputs),
        }
        found.append((updated, session_id, row))
    found.sort(key=lambda item: (-item[0], item[1]))
    return {
        "scope": "children",
        "sourceConversationId": source,
        "limit": limit,
        "returnedCount": min(len(found), limit),
        "hasMore": len(found) > limit,
        "conversations": [row for _, _, row in found[:limit]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rescan", description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions_dir")
    ap.add_argument("--source", required=True)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--limit", type=int, default=20)
    args = ap.parse_args(argv)
    times = []
    answer: dict[str, Any] = {}
    for _ in range(args.calls):
        started = time.perf_counter()
        answer = children_by_rescan(args.sessions_dir, args.source, args.limit)
        times.append(time.perf_counter() - started)
    ordered = sorted(times)
    print(
        json.dumps(
            {
                "calls": args.calls,
                "seconds": times,
                "median_s": ordered[len(ordered) // 2],
                "returnedCount": answer.get("returnedCount"),
                "ids": [row["conversationId"] for row in answer.get("conversations", [])],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
