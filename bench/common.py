"""Small helpers shared by the benchmark's parts: percentiles, progress, child processes and memory."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_index.indexer.tuning import TIMING_SETTINGS

REPO = Path(__file__).resolve().parent.parent
_T0 = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr, with the seconds since the harness started."""
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def ccweb_index_command() -> str:
    """The `ccweb-index` installed beside the running interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "ccweb-index"
    if beside.exists():
        return str(beside)
    found = shutil.which("ccweb-index")
    if found is None:
        raise RuntimeError("the ccweb-index command is not installed (pip install -e .)")
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any CCWEB_* setting but the timing settings (which the
    benchmark's own waits follow too), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCWEB_") or k in TIMING_SETTINGS}
    env.update(extra)
    return env


# --- statistics ----------------------------------------------------------------------------------


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(seconds: list[float]) -> dict[str, Any]:
    """p50/p99/mean/min/max in milliseconds of a list of durations in seconds."""
    values = sorted(seconds)
    return {
        "calls": len(values),
        "p50_ms": percentile(values, 50) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "mean_ms": sum(values) / len(values) * 1000,
        "min_ms": values[0] * 1000,
        "max_ms": values[-1] * 1000,
    }


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# --- memory --------------------------------------------------------------------------------------



def proc_status_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a live process, in MB (10^6 bytes)."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024 / 1e6
    return {"rss_mb": out.get("VmRSS", 0.0), "peak_rss_mb": out.get("VmHWM", 0.0)}


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids.extend(int(x) for x in f.read().split())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return kids


def tree_memory(pid: int) -> tuple[float, dict[int, float]]:
    """(the summed RSS of `pid` and all its descendants right now, in MB; each one's VmHWM, in MB).

    VmHWM is a process's own high-water mark since its exec. wait4's ru_maxrss is not: on Linux it
    starts from the RSS of the process that forked it (the bench's own, once that has grown)."""
    total, peaks, stack = 0.0, {}, [pid]
    while stack:
        current = stack.pop()
        try:
            status = proc_status_mb(current)
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += status["rss_mb"]
        peaks[current] = status["peak_rss_mb"]
        stack.extend(_children(current))
    return total, peaks


@dataclass
class Measured:
    """A finished child process: exit code, wall seconds, its output, and its memory."""

    returncode: int
    seconds: float
    stdout: str
    stderr: str
    maxrss_mb: float  # the largest single process's own peak (VmHWM)
    tree_peak_rss_mb: float  # sampled sum of RSS over the process and its descendants
    tree_max_processes: int
    tree_hwm_sum_mb: float = 0.0  # the sum of every process's own peak: no sample misses these
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_rss_mb(self) -> float:
        """The figure to report against a limit: the tree's peak, or more. The sampled sum can miss a
        short peak; the sum of each process's own peak cannot, though it adds peaks that were not
        at the same moment, so the larger of the two is an upper bound."""
        return max(self.tree_hwm_sum_mb, self.tree_peak_rss_mb)

    def json_stdout(self) -> Any:
        """The last line of stdout, parsed as JSON."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise RuntimeError(f"no output; stderr:\n{self.stderr[-4000:]}")
        return json.loads(lines[-1])

    def check(self, what: str) -> Measured:
        if self.returncode != 0:
            raise RuntimeError(f"{what} exited {self.returncode}; stderr:\n{self.stderr[-4000:]}")
        return self


def run_measured(
    args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None, sample_every: float = 0.02
) -> Measured:
    """Run a command to completion; time it and measure its peak memory (each process's own peak and
    a sampled tree sum).

    Output goes through temporary files, not pipes, so nothing here competes with the child for a
    core while it runs, beyond one /proc walk every `sample_every` seconds.
    """
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd)
        peak, most = 0.0, 0
        peaks: dict[int, float] = {}  # each process's own peak, as last seen before it exited
        done = threading.Event()

        def sample() -> None:
            nonlocal peak, most
            while not done.is_set():
                rss, seen = tree_memory(proc.pid)
                peak, most = max(peak, rss), max(most, len(seen))
                for pid, value in seen.items():  # a zombie shows no VmHWM: keep what it showed alive
                    peaks[pid] = max(peaks.get(pid, 0.0), value)
                done.wait(sample_every)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, _usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(
            returncode=proc.returncode,
            seconds=seconds,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
            maxrss_mb=max(peaks.values(), default=0.0),
            tree_peak_rss_mb=peak,
            tree_max_processes=most,
            tree_hwm_sum_mb=sum(peaks.values()),
        )


def python_module(module: str, *args: str) -> list[str]:
    """argv running `python -m module` with this interpreter (the child's cwd must be the repo)."""
    return [sys.executable, "-m", module, *args]


def read_all_files(directory: str | Path) -> tuple[int, int]:
    """Read every file of a directory once (to warm the page cache): (files, bytes)."""
    files = total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb", buffering=0) as f:
                    while chunk := f.read(1 << 22):
                        total += len(chunk)
                files += 1
    return files, total
