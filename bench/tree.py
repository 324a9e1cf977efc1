"""scope "descendants" against scope "children" for the same source, in-process (issue 13).

    python -m bench.tree [--dir D] [--children 20] [--per-child 9] [--total 2000] [--others 8000]
                         [--calls 2000] [--round 50] [--json OUT]

Writes a 3-level tree under one source: `--children` children, `--per-child` grandchildren each, and
great-grandchildren spread over the grandchildren up to `--total` conversations in the tree, beside
`--others` conversations outside it (so the index is not the tree alone). Then times, through
`bench.inprocess` (a watcher, every call's whole code path), the first page of children, of
descendants, of descendants after a cursor, and of a lookup of 100 ids, limit 20 each. Prints the
JSON and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.inprocess import measure

SOURCE = "orchestrator"
BASE_MS = 1_790_000_000_000
TOOL = "ccweb_list_conversations"


def write_session(directory: Path, session_id: str, parent: str | None, n: int) -> None:
    doc: dict[str, Any] = {
        "title": f"worker {session_id}",
        "agent": "claude" if n % 3 else "codex",
        "status": "running" if n % 4 else "idle",
        "updatedAt": BASE_MS + n * 1000,
        "messages": [{"id": "u0", "role": "user", "content": f"do part {n}", "createdAt": BASE_MS + n}],
    }
    if parent is not None:
        doc["createdFrom"] = {"kind": "mcp", "sourceSessionId": parent}
    (directory / f"{session_id}.json").write_text(json.dumps(doc))


def write_tree(directory: Path, children: int, per_child: int, total: int, others: int) -> list[str]:
    """The tree's ids, level by level."""
    directory.mkdir(parents=True, exist_ok=True)
    write_session(directory, SOURCE, None, 0)
    level1 = [f"c{a}" for a in range(children)]
    level2 = [f"{parent}-{b}" for parent in level1 for b in range(per_child)]
    level3 = [f"{level2[n % len(level2)]}-{n // len(level2)}" for n in range(total - len(level1) - len(level2))]
    n = 0
    for ids, parent_of in ((level1, lambda i: SOURCE), (level2, lambda i: i.rsplit("-", 1)[0]), (level3, lambda i: i.rsplit("-", 1)[0])):
        for session_id in ids:
            n += 1
            write_session(directory, session_id, parent_of(session_id), n)
    for m in range(others):
        write_session(directory, f"other-{m}", None if m % 2 else f"other-{m - 1}", n + m)
    return level1 + level2 + level3


def cases(tree: list[str], cursor: str | None) -> list[dict[str, Any]]:
    out = [
        {"name": "children", "tool": TOOL, "args": {"scope": "children"}, "source": SOURCE},
        {"name": "descendants", "tool": TOOL, "args": {"scope": "descendants"}, "source": SOURCE},
        {"name": "ids_100", "tool": TOOL, "args": {"conversationIds": tree[-100:]}, "source": SOURCE},
    ]
    if cursor is not None:
        out.append({"name": "descendants_page_2", "tool": TOOL, "args": {"scope": "descendants", "cursor": cursor}, "source": SOURCE})
    return out


def first_cursor(directory: Path, db: Path) -> str:
    from ccweb_index.server.service import Service

    service = Service(directory, db)
    service.start()
    try:
        payload = service.call(TOOL, {"scope": "descendants"}, SOURCE).payload
    finally:
        service.close()
    return str(payload["nextCursor"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tree", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where to write the corpus and the index (default: a temporary directory)")
    ap.add_argument("--children", type=int, default=20)
    ap.add_argument("--per-child", type=int, default=9)
    ap.add_argument("--total", type=int, default=2000)
    ap.add_argument("--others", type=int, default=8000)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--round", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="ccweb-bench-tree-"))
    sessions, db = root / "sessions", root / "index.sqlite"
    tree = write_tree(sessions, args.children, args.per_child, args.total, args.others)
    result = measure(str(sessions), str(db), cases(tree, first_cursor(sessions, db)), args.calls, args.round, warmup=50)
    result["tree"] = {"conversations": len(tree), "children": args.children, "others": args.others}
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    children_p50 = result["cases"]["children"]["p50_ms"]
    print("\n| case (limit 20) | returned | p50 | p99 | min | vs children p50 |\n| --- | --- | --- | --- | --- | --- |")
    for name, figures in result["cases"].items():
        print(f"| {name} | {figures['returnedCount']} | {figures['p50_ms']:.3f} ms | {figures['p99_ms']:.3f} ms "
              f"| {figures['min_ms']:.3f} ms | {figures['p50_ms'] / children_p50:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
