"""Peak memory of a cold build of a few huge sessions (issue 10, item 4).

    python -m bench.huge_build --out DIR [--files 4] [--mb 250] [--code TREE] [--label after]

Writes --files session files of about --mb MB each (text mostly Chinese with emoji, as cc-web's are,
one user input every few messages), then times `ccweb-index build` into a new index and measures the
peak RSS of its whole process tree (the command and its parse workers, sampled: bench.common). Prints
one JSON object, with the target of issue 10: 1.5 x the largest file + 300 MB. `--code TREE` builds
with another checkout (a "before" figure), as in bench.hot_session. The corpus is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from pathlib import Path

from bench.common import progress, run_measured
from bench.hot_session import server_command

_TEXT = "我们需要修复这个索引的问题，然后重新部署服务。😀 The build is fast; 日本語も少し。"


def write_session(path: Path, target: int, seed: int) -> int:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(b'{"title":"huge","status":"running","updatedAt":"2026-11-29T08:00:00.000Z","messages":[')
        written, n = 0, 0
        while written < target:
            role = "user" if n % 4 == 0 else "assistant"
            size = rng.randint(200, 6000) if role == "assistant" else rng.randint(20, 400)
            text = (_TEXT * (size // len(_TEXT) + 1))[:size]
            message = {"id": f"m{n}", "role": role, "content": text, "createdAt": "2026-11-29T08:00:00.000Z"}
            data = (b"," if n else b"") + json.dumps(message, ensure_ascii=False).encode()
            f.write(data)
            written += len(data)
            n += 1
        f.write(b"]}")
    return path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mb", type=float, default=250.0)
    parser.add_argument("--code")
    parser.add_argument("--label", default="after")
    parser.add_argument("--keep", action="store_true", help="keep the corpus (for another run with --reuse)")
    parser.add_argument("--reuse", action="store_true", help="use the corpus already in --out")
    args = parser.parse_args()
    sessions = args.out / "sessions"
    if not args.reuse:
        sessions.mkdir(parents=True)
        for n in range(args.files):
            size = write_session(sessions / f"huge{n}.json", int(args.mb * 1e6), n)
            progress(f"wrote huge{n}.json: {size / 1e6:.1f} MB")
    sizes = [p.stat().st_size for p in sessions.iterdir()]
    db = args.out / f"index-{args.label}.sqlite"
    command, env = server_command(args.code)
    measured = run_measured([*command, "build", "--sessions-dir", str(sessions), "--db", str(db)], env=env)
    measured.check("build")
    largest = max(sizes) / 1e6
    print(json.dumps({
        "label": args.label,
        "files": len(sizes),
        "largest_mb": largest,
        "total_mb": sum(sizes) / 1e6,
        "seconds": measured.seconds,
        "tree_peak_rss_mb": measured.tree_peak_rss_mb,
        "largest_process_rss_mb": measured.maxrss_mb,
        "processes": measured.tree_max_processes,
        "target_mb": 1.5 * largest + 300,
        "loadavg": os.getloadavg(),
        "build_output": measured.stderr.strip().splitlines()[-1:],
    }))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if not args.keep:
        shutil.rmtree(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
