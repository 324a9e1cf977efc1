"""Tool calls over stdio with the MCP SDK's `ClientSession`, against `ccweb-index serve` and the empty server.

One `ccweb-index serve` process per distinct source conversation (the source is set through
`CCWEB_SOURCE_SESSION_ID`, as a client launching it would), plus `bench.empty_server`, the floor: the
same SDK answering a tool that does nothing. The same client code drives all of them. The cases and
the floor are interleaved in rounds, so a burst of load from elsewhere on the machine hits the floor
and the tools alike. Each timed call is `await session.call_tool(...)` as an agent's client makes it:
request out, answer back and validated by the SDK (against the tool's output schema when it has one,
as the SDK client does for every call).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bench.common import REPO, ccweb_index_command, clean_env, latency_summary, proc_status_mb
from bench.empty_server import NOOP

FLOOR = "floor"


def _children_of_self() -> set[int]:
    kids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                kids.update(int(x) for x in f.read().split())
        except FileNotFoundError:
            continue
    return kids


def cpu_ns(pid: int) -> int:
    """CPU time used so far by every thread of a live process, in nanoseconds (from schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


# --- where the processes run ---------------------------------------------------------------------
# Left to the scheduler, one server of two identical ones answered at a p50 0.3-0.4 ms lower than the
# other, run after run (1.17x against 1.32x canned, the same command twice): whichever the scheduler
# keeps beside the client skips a cross-core wake-up per message. So the client runs on one CPU and
# every server (product, floor, canned, baseline) on another: each pays the same wake-ups.


# The CPUs this process may use, read once: inside the step the client's own thread is pinned, and
# asking it then would place a server started there (the canned one) beside the client.
_USABLE_CPUS = sorted(os.sched_getaffinity(0))


def placement() -> tuple[set[int], set[int]] | None:
    """(the client's CPUs, every server's CPUs), or None on a machine of one CPU."""
    cpus = _USABLE_CPUS
    return ({cpus[0]}, {cpus[1]}) if len(cpus) >= 2 else None


# Run a command on the given CPUs: the affinity is set before the exec, so every thread inherits it.
_PIN_AND_EXEC = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); os.execvp(sys.argv[2], sys.argv[2:])"


@contextmanager
def _client_placed() -> Iterator[None]:
    """This thread (the client's) on the client's CPUs until the block ends."""
    where, was = placement(), os.sched_getaffinity(0)
    if where is not None:
        os.sched_setaffinity(0, where[0])
    try:
        yield
    finally:
        os.sched_setaffinity(0, was)


def _server(command: str, args: list[str], env: dict[str, str], cwd: str | None = None) -> StdioServerParameters:
    where = placement()
    if where is None:
        return StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    (server_cpu,) = where[1]
    return StdioServerParameters(
        command=sys.executable, args=["-c", _PIN_AND_EXEC, str(server_cpu), command, *args], env=env, cwd=cwd
    )


def product_server(sessions_dir: str, db: str, source: str | None, command: str | None = None) -> StdioServerParameters:
    """`command`: another `ccweb-index` (e.g. an older checkout's, for a before/after side by side)."""
    env = clean_env(**({"CCWEB_SOURCE_SESSION_ID": source} if source else {}))
    return _server(command or ccweb_index_command(), ["serve", "--sessions-dir", sessions_dir, "--db", db], env)


def floor_server(*extra: str) -> StdioServerParameters:
    return _server(sys.executable, ["-m", "bench.empty_server", *extra], clean_env(), str(REPO))


async def _connect(
    stack: AsyncExitStack, params: StdioServerParameters, errlog: IO[str]
) -> tuple[ClientSession, int | None, float]:
    """A started, initialized client session; the server's pid; seconds it took."""
    before = _children_of_self()
    started = time.perf_counter()
    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    new = _children_of_self() - before
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    await session.list_tools()  # caches the output schemas the client validates against
    return session, (new.pop() if len(new) == 1 else None), time.perf_counter() - started


def same_answer(after: Any, before: Any, *, same_index: bool = True) -> bool:
    """Whether a baseline answered the same: every field both answers have is equal, row by row, so an
    older contract with fewer fields is compared on the fields it has. A `changeToken` names its index,
    so it is compared only when both servers read one index. A `nextCursor` is opaque, and two
    versions may spell one position differently (CURSOR_FORMAT): only whether there is one counts."""
    if isinstance(after, dict) and isinstance(before, dict):
        keys = (after.keys() & before.keys()) - (set() if same_index else {"changeToken"})
        return all(
            (after[k] is None) == (before[k] is None)
            if k == "nextCursor"
            else same_answer(after[k], before[k], same_index=same_index)
            for k in keys
        )
    if isinstance(after, list) and isinstance(before, list):
        return len(after) == len(before) and all(same_answer(a, b, same_index=same_index) for a, b in zip(after, before))
    return bool(after == before)


async def measure(
    sessions_dir: str,
    db: str,
    cases: list[dict[str, Any]],
    *,
    calls: int,
    per_round: int,
    warmup: int,
    errlog: IO[str],
    work: Path,
    canned: bool = True,
    baseline: str | None = None,
    baseline_db: str | None = None,
) -> dict[str, Any]:
    """p50/p99 of every case and of the floor, plus the servers' memory after the calls.

    With `canned`, each case is also timed against `bench.empty_server --canned`, which answers that
    case's own (prebuilt) result with no product code: what the SDK costs for an answer that size.
    With `baseline` (another `ccweb-index` command), each case is also timed against it, as
    `before:<case>`, interleaved with the rest: a before/after measured side by side; on `baseline_db`
    when its index is its own (an older checkout may not read this one's schema).
    """
    floor_case = {"name": FLOOR, "tool": NOOP, "args": {}, "server": FLOOR}
    sources = sorted({case.get("source") or "" for case in cases})
    servers: dict[str, StdioServerParameters] = {FLOOR: floor_server()}
    for source in sources:
        servers[f"source:{source}"] = product_server(sessions_dir, db, source or None)
        if baseline:
            servers[f"before:{source}"] = product_server(sessions_dir, baseline_db or db, source or None, baseline)
    all_cases = [floor_case] + [{**case, "server": f"source:{case.get('source') or ''}"} for case in cases]
    if baseline:
        all_cases += [
            {**case, "name": f"before:{case['name']}", "server": f"before:{case.get('source') or ''}"} for case in cases
        ]

    async with AsyncExitStack() as stack:
        stack.enter_context(_client_placed())
        sessions: dict[str, ClientSession] = {}
        pids: dict[str, int] = {}
        start_s: dict[str, float] = {}
        for key, params in servers.items():
            sessions[key], pid, start_s[key] = await _connect(stack, params, errlog)
            if pid is not None:
                pids[key] = pid

        first: dict[str, Any] = {}
        answers: dict[str, Any] = {}
        for case in all_cases:
            session = sessions[case["server"]]
            t0 = time.perf_counter()
            result = await session.call_tool(case["tool"], case["args"])
            case_first = time.perf_counter() - t0  # the first call waits for the server's start-up indexing
            for _ in range(max(0, warmup - 1)):
                result = await session.call_tool(case["tool"], case["args"])
            payload = result.structured_content or {}
            answers[case["name"]] = payload
            first[case["name"]] = {
                "first_call_s": case_first,
                "is_error": bool(result.is_error),
                "returnedCount": payload.get("returnedCount"),
                "ids": [row["conversationId"] for row in payload.get("conversations", [])] or None,
            }

        for case in cases:
            before = answers.get(f"before:{case['name']}")
            if before is not None and not same_answer(answers[case["name"]], before, same_index=not baseline_db):
                raise RuntimeError(f"{case['name']}: the baseline's answer differs from this checkout's")

        if canned:
            product = next(iter(k for k in sessions if k != FLOOR))
            definitions = {t.name: t for t in (await sessions[product].list_tools()).tools}
            spec: dict[str, Any] = {"tools": [], "results": {}}
            for case in cases:
                tool = definitions[case["tool"]].model_dump(by_alias=True, exclude_none=True, mode="json")
                tool["name"] = f"canned_{case['name']}"
                spec["tools"].append(tool)
                spec["results"][tool["name"]] = answers[case["name"]]
            canned_file = work / "canned-answers.json"
            canned_file.write_text(json.dumps(spec, ensure_ascii=False))
            key = "canned"
            sessions[key], pid, start_s[key] = await _connect(stack, floor_server("--canned", str(canned_file)), errlog)
            servers[key] = floor_server("--canned", str(canned_file))
            if pid is not None:
                pids[key] = pid
            for case in cases:
                canned_case = {"name": f"canned:{case['name']}", "tool": f"canned_{case['name']}", "args": {},
                               "server": key}  # fmt: skip
                all_cases.append(canned_case)
                for _ in range(max(1, warmup)):
                    result = await sessions[key].call_tool(canned_case["tool"], {})
                if result.structured_content != answers[case["name"]]:
                    raise RuntimeError(f"the canned answer of {case['name']} differs from the product's")
                first[canned_case["name"]] = {}

        samples: dict[str, list[float]] = {case["name"]: [] for case in all_cases}
        server_cpu: dict[str, int] = dict.fromkeys(samples, 0)
        client_cpu: dict[str, int] = dict.fromkeys(samples, 0)
        last: dict[str, Any] = {}
        clock, process_ns = time.perf_counter, time.process_time_ns
        done = rounds = 0
        while done < calls:
            n = min(per_round, calls - done)
            # Each round begins one case further on, so that no case keeps its place in the rounds: in a
            # fixed order, one install timed in two places differed at p50 by 3-22 µs, run after run, in
            # the same direction (docs/benchmarks.md, "eighth look").
            start = rounds % len(all_cases)
            for case in all_cases[start:] + all_cases[:start]:
                call = sessions[case["server"]].call_tool
                tool, args, out = case["tool"], case["args"], samples[case["name"]]
                pid = pids.get(case["server"])
                server0, client0 = (cpu_ns(pid) if pid else 0), process_ns()
                for _ in range(n):
                    t0 = clock()
                    result = await call(tool, args)
                    out.append(clock() - t0)
                    if result.is_error:
                        raise RuntimeError(f"{case['name']}: tool error {result.content[0].text}")
                client_cpu[case["name"]] += process_ns() - client0
                server_cpu[case["name"]] += (cpu_ns(pid) - server0) if pid else 0
                last[case["name"]] = result
            done += n
            rounds += 1
        for name in samples:
            first[name]["client_cpu_ms_per_call"] = client_cpu[name] / len(samples[name]) / 1e6
            if server_cpu[name]:
                first[name]["server_cpu_ms_per_call"] = server_cpu[name] / len(samples[name]) / 1e6

        # Diagnostic: the part of each call the client spends validating the result against the
        # tool's output schema (the SDK does it in call_tool; the empty tool has no schema).
        for case in all_cases:
            session, result = sessions[case["server"]], last[case["name"]]
            times = []
            for _ in range(50):
                t0 = clock()
                await session.validate_tool_result(case["tool"], result)
                times.append(clock() - t0)
            first[case["name"]]["client_validation_ms"] = sorted(times)[len(times) // 2] * 1000

        memory: dict[str, dict[str, Any]] = {}  # and where each server ran, as the kernel has it
        for key, pid in pids.items():
            try:
                memory[key] = {**proc_status_mb(pid), "cpus": sorted(os.sched_getaffinity(pid))}
            except (FileNotFoundError, ProcessLookupError):
                pass

    results = {}
    for case in all_cases:
        results[case["name"]] = {**latency_summary(samples[case["name"]]), **first[case["name"]]}
    floor = results[FLOOR]
    for case in cases:
        r = results[case["name"]]
        r["p50_over_floor"] = r["p50_ms"] / floor["p50_ms"]
        r["p99_over_floor"] = r["p99_ms"] / floor["p99_ms"]
        before = results.get(f"before:{case['name']}")
        if before is not None:
            r["before"] = {k: v for k, v in before.items() if k not in ("ids",)}
        same = results.get(f"canned:{case['name']}")
        if same is not None:
            r["canned"] = {k: v for k, v in same.items() if k not in ("is_error", "ids", "returnedCount")}
            r["canned"]["p50_over_floor"] = same["p50_ms"] / floor["p50_ms"]
            r["canned"]["p99_over_floor"] = same["p99_ms"] / floor["p99_ms"]
            r["p50_over_canned"] = r["p50_ms"] / same["p50_ms"]
            r["p99_over_canned"] = r["p99_ms"] / same["p99_ms"]
            if before is not None:
                r["before"]["p50_over_canned"] = before["p50_ms"] / same["p50_ms"]
                r["before"]["p99_over_canned"] = before["p99_ms"] / same["p99_ms"]
    where = placement()
    return {
        "placement": None if where is None else {"client_cpus": sorted(where[0]), "server_cpus": sorted(where[1])},
        "servers": {key: {"start_s": start_s[key], **memory.get(key, {})} for key in servers},
        "floor": floor,
        "cases": {case["name"]: results[case["name"]] for case in cases},
    }


TARGET_CASES = ("children_hot", "all_20", "inputs_largest")  # issue 12, item 5


def _table(result: dict[str, Any]) -> str:
    head = "| case | p50 ms | p99 ms | canned p50 | canned p99 | p50 / canned | p99 / canned | server CPU ms (this / canned) |"
    lines = [head, "|" + " --- |" * 8]
    for name, r in result["cases"].items():
        rows = [(name, r)] + ([(f"{name} (before)", r["before"])] if "before" in r else [])
        for label, x in rows:
            c = r["canned"]
            lines.append(
                f"| `{label}` | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} | {c['p50_ms']:.3f} | {c['p99_ms']:.3f} | "
                f"{x['p50_over_canned']:.2f}× | {x['p99_over_canned']:.2f}× | "
                f"{x.get('server_cpu_ms_per_call', 0):.3f} / {c.get('server_cpu_ms_per_call', 0):.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.stdio_calls CORPUS --db INDEX [--baseline OTHER_CCWEB_INDEX]`: the stdio step of
    bench.run alone, on an existing index, for the cases of issue 12 item 5 (or `--cases`)."""
    import argparse
    import tempfile

    import anyio

    from bench.run import Scale, tool_cases

    ap = argparse.ArgumentParser(prog="python -m bench.stdio_calls", description=main.__doc__)
    ap.add_argument("corpus")
    ap.add_argument("--db", required=True)
    ap.add_argument("--cases", default=",".join(TARGET_CASES))
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--round", type=int, default=50)
    ap.add_argument("--baseline", help="another ccweb-index command, measured side by side as `before`")
    ap.add_argument("--baseline-db", help="the baseline's own index, when its schema is not this checkout's")
    ap.add_argument("--json", help="also write the whole result here")
    args = ap.parse_args(argv)
    summary = json.loads(Path(f"{os.path.normpath(args.corpus)}.summary.json").read_text())
    scale = Scale("main", summary["sessions"], summary["scale_bytes"], summary.get("profile", "short"),
                  Path(args.corpus), summary, Path(args.db))  # fmt: skip
    wanted = args.cases.split(",")
    cases = [case for case in tool_cases(scale) if case["name"] in wanted]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as work, open(Path(work) / "servers.log", "w") as errlog:
        result = anyio.run(
            lambda: measure(
                args.corpus, args.db, cases, calls=args.calls, per_round=args.round, warmup=20, errlog=errlog,
                work=Path(work), baseline=args.baseline, baseline_db=args.baseline_db,
            )
        )  # fmt: skip
    result["load_avg"] = {"start": load, "end": os.getloadavg()}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(_table(result))
    print(
        f"floor (empty tool) p50 {result['floor']['p50_ms']:.3f} ms; load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
