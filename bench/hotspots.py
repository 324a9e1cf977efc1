"""Top functions of a py-spy profile in its raw (collapsed stacks) format.

    python -m bench.hotspots PROFILE.raw [--top 25] [--under FUNC]

Prints two rankings: *self* (the sampled frame itself was running) and *inclusive* (the function was
anywhere on the stack), each as a share of all samples. Frames are grouped by function and file,
not by line. `--under FUNC` keeps only the stacks that pass through a function whose name contains
FUNC (e.g. `reconcile`, `call_tool`), so start-up and idle loops do not dilute the picture.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


_PROCESS = re.compile(r'^process \d+:"?(?P<cmd>.*?)"?$')


def _function(frame: str) -> str:
    process = _PROCESS.match(frame.strip())
    if process:  # py-spy --subprocesses roots each stack at its process: group them by command line
        cmd = process.group("cmd")
        return "[process] " + (cmd if len(cmd) < 60 else cmd[:57] + "...")
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match.group('func')} ({path})"


def load(path: str, under: str | None = None) -> tuple[Counter[str], Counter[str], int]:
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [_function(fr) for fr in stack.split(";") if fr]
            if under is not None:
                cut = next((i for i, fr in enumerate(frames) if under in fr.split(" (")[0]), None)
                if cut is None:
                    continue
                frames = frames[cut:]
            n = int(count)
            total += n
            self_counts[frames[-1]] += n
            for fr in set(frames):
                incl_counts[fr] += n
    return self_counts, incl_counts, total


def render(path: str, top: int = 25, under: str | None = None) -> str:
    self_counts, incl_counts, total = load(path, under)
    if not total:
        return f"{path}: no samples" + (f" under {under!r}" if under else "")
    lines = [f"{path}: {total} samples" + (f" under {under!r}" if under else ""), "", "self %  function"]
    lines += [f"{100 * n / total:6.1f}  {fn}" for fn, n in self_counts.most_common(top)]
    lines += ["", "incl %  function"]
    lines += [f"{100 * n / total:6.1f}  {fn}" for fn, n in incl_counts.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hotspots", description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--under")
    args = ap.parse_args(argv)
    print(render(args.profile, args.top, args.under))
    return 0


if __name__ == "__main__":
    sys.exit(main())
