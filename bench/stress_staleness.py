"""Staleness stress: a writer (thread or process) changes session files; caller threads call the
tools through an in-process Service with an inotify watcher, and every answer is checked against
the writes completed before the call began.

    CALLERS=6 [TRACE=1] python -m bench.stress_staleness SECONDS [thread|process] [NIDS]

Written by an independent reviewer (2026-12-04) and kept as it was, apart from paths and layout:
with six callers it finds the stale answers in docs/reliability.md ("stale answers under six
concurrent callers"); prints `stale=N` and up to ten stale answers. A diagnostic, not a benchmark: no figure
of it goes in docs/benchmarks.md.

TRACE=1 (added 2026-12-04, how the late commit after a forget was found) records every commit,
refused read and forget of the index, and prints under each of the first four stale answers the
writes and index events of its id from 300 ms before the call to 50 ms after, on one wall clock."""

import bisect
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import watchdog.version

from ccweb_index.server.service import Service

from conftest import session

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30
MODE = sys.argv[2] if len(sys.argv) > 2 else "thread"
NIDS = int(sys.argv[3]) if len(sys.argv) > 3 else 12
IDS = [f"c{i:02d}" for i in range(NIDS)]


def doc(serial):
    return json.dumps(session(f"i{serial:09d}", title=f"v{serial:09d}", updated="2026-11-01T00:00:00Z")).encode()


def writer(sdir, done, stop, logq, seed):
    rnd = random.Random(seed)
    state = {}  # id -> serial or absent
    for i in IDS:
        if os.path.exists(os.path.join(sdir, i + ".json")):
            state[i] = int(json.load(open(os.path.join(sdir, i + ".json")))["title"][1:])
    log = []
    serial = 1000
    op = 0
    counts = {}

    def path(i):
        return os.path.join(sdir, i + ".json")

    while not stop.is_set():
        i = rnd.choice(IDS)
        present = i in state
        if not present:
            kind = rnd.choice(["create_inplace", "create_atomic"])
        else:
            kind = rnd.choice(["inplace", "inplace", "inplace_mtime_back", "atomic", "delete", "rename", "rename_over"])
        serial += 1
        op += 1
        changes = []
        if kind == "create_inplace":
            with open(path(i), "wb") as f:
                f.write(doc(serial))
            changes = [(i, serial)]
        elif kind == "create_atomic" or kind == "atomic":
            tmp = os.path.join(sdir, f".{i}.json.tmp")
            with open(tmp, "wb") as f:
                f.write(doc(serial))
            os.replace(tmp, path(i))
            changes = [(i, serial)]
        elif kind in ("inplace", "inplace_mtime_back"):
            st = os.stat(path(i))
            with open(path(i), "r+b") as f:
                f.seek(0)
                f.write(doc(serial))
                f.truncate()
            if kind == "inplace_mtime_back":
                os.utime(path(i), ns=(st.st_atime_ns, st.st_mtime_ns))
            changes = [(i, serial)]
        elif kind == "delete":
            os.unlink(path(i))
            changes = [(i, None)]
        elif kind in ("rename", "rename_over"):
            others = [j for j in IDS if j != i and ((j in state) == (kind == "rename_over"))]
            if not others:
                serial -= 1
                op -= 1
                continue
            j = rnd.choice(others)
            os.rename(path(i), path(j))
            changes = [(i, None), (j, state[i])]
        for k, v in changes:
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
        log.append((op, changes, time.time_ns()))
        counts[kind] = counts.get(kind, 0) + 1
        done.value = op  # after the change completed
        r = rnd.random()
        if r < 0.3:
            time.sleep(rnd.random() * 0.003)
        elif r < 0.35:
            time.sleep(0.02)
        # else: burst
    logq.put((log, counts))


TRACING = bool(os.environ.get("TRACE"))
TRACE: list[tuple] = []  # (wall ns, thread, what, id, ...): the index's writes, when TRACING


def trace_index_writes():
    """Record what each writer does to the index (TRACE=1): commits, refused reads, forgets."""
    from ccweb_index.indexer import refresh, store

    record_loaded, forget, newer_than_row = store.record_loaded, store.forget, refresh._newer_than_row

    def state(sig):
        return sig.ino, sig.size, sig.ctime_ns

    def traced_record(conn, loaded):
        for it in loaded:
            title = None if it.row is None else it.row.title
            TRACE.append((time.time_ns(), threading.current_thread().name, "commit", it.session_id, title, state(it.sig), it.racy))
        return record_loaded(conn, loaded)

    def traced_forget(conn, ids):
        TRACE.extend((time.time_ns(), threading.current_thread().name, "forget", i) for i in ids)
        return forget(conn, ids)

    def traced_newer(item, row, st):
        kept = newer_than_row(item, row, st)
        if not kept:
            title = None if item.row is None else item.row.title
            TRACE.append((time.time_ns(), threading.current_thread().name, "refused", item.session_id, title,
                          state(item.sig), item.racy, None if row is None else (state(row.sig), row.racy)))
        return kept

    store.record_loaded, store.forget, refresh._newer_than_row = traced_record, traced_forget, traced_newer


def print_trace(stale_answer, log):
    """The writes of the stale answer's id, and of any id that held the value answered, and what
    the index did with that id, from 300 ms before the call to 50 ms after it."""
    i, v, began, ended = stale_answer[2], stale_answer[3], stale_answer[-2], stale_answer[-1]
    low, high = began - 300_000_000, ended + 50_000_000
    print(f"  call {began}..{ended}")
    for op, changes, at in log:
        if (low < at < high and any(c[0] == i for c in changes)) or any(c[1] == v for c in changes):
            print("  write", at, op, changes)
    for event in TRACE:
        if event[3] == i and low < event[0] < high:
            print("  index", event)


def main():
    if TRACING:
        trace_index_writes()
    if os.environ.get("BREAK_COUNTS"):
        from ccweb_index.indexer import inotify_reader

        inotify_reader._CountedQueue.all_handled = lambda self: True
    if os.environ.get("BREAK_PARK"):
        from ccweb_index.indexer import inotify_reader

        inotify_reader.InotifyReader.drained = lambda self: True
    base = Path(tempfile.mkdtemp(prefix="run-"))
    sdir = base / "s"
    sdir.mkdir()
    initial = {}
    for n, i in enumerate(IDS[: NIDS // 2]):
        (sdir / f"{i}.json").write_bytes(doc(n))
        initial[i] = n
    svc = Service(sdir, base / "db" / "i.sqlite", watch=True)
    svc.start()
    w = svc.watcher
    from ccweb_index.indexer.watch import InotifyWatcher

    assert isinstance(w, InotifyWatcher)
    stats = {"sync": 0, "sync_false": 0, "drained_true_in_sync": 0, "fallback_reconcile": 0}
    orig_sync, orig_drained = w.sync, w.drained
    in_sync = threading.local()

    def sync():
        stats["sync"] += 1
        in_sync.v = True
        try:
            ok = orig_sync()
        finally:
            in_sync.v = False
        if not ok:
            stats["sync_false"] += 1
        in_sync.path = (ok, getattr(in_sync, "d", None))
        return ok

    def drained():
        d = orig_drained()
        if getattr(in_sync, "v", False) and d:
            stats["drained_true_in_sync"] += 1
        if getattr(in_sync, "v", False):
            in_sync.d = d
        return d

    w.sync = sync
    w.drained = drained
    orig_rec = svc.indexer.reconcile

    def rec(*a, **k):
        stats["fallback_reconcile"] += 1
        return orig_rec(*a, **k)

    svc.indexer.reconcile = rec
    if MODE == "process":
        ctx = mp.get_context("fork")
        done = ctx.Value("q", 0, lock=False)
        stop = ctx.Event()
        logq = ctx.Queue()
        p = ctx.Process(target=writer, args=(str(sdir), done, stop, logq, 1))
        p.start()
    else:

        class V:
            value = 0

        done = V()
        stop = threading.Event()
        import queue

        logq = queue.Queue()
        p = threading.Thread(target=writer, args=(str(sdir), done, stop, logq, 1))
        p.start()
    records = []
    c0 = w.cookies_sent
    t_end = time.monotonic() + SECONDS
    agg = {"max_call": 0.0, "errors": 0}

    def caller(seed):
        rnd = random.Random(seed)
        while time.monotonic() < t_end:
            k = done.value
            t0 = time.time_ns()
            if rnd.random() < float(os.environ.get("PLIST", "0.75")):
                r = svc.call("ccweb_list_conversations", {"scope": "all", "limit": 100}, None)
                dt = (time.time_ns() - t0) / 1e9
                if r.is_error:
                    agg["errors"] += 1
                    print("error", r.payload)
                    continue
                ans = {row["conversationId"]: int(row["title"][1:]) for row in r.payload["conversations"]}
                records.append(
                    (
                        k,
                        "list",
                        {i: ans.get(i) for i in IDS},
                        getattr(in_sync, "path", None),
                        t0,
                        time.time_ns(),
                        done.value,
                    )
                )
                in_sync.path = None
            else:
                i = rnd.choice(IDS)
                r = svc.call("ccweb_list_user_inputs", {"conversationId": i}, None)
                dt = (time.time_ns() - t0) / 1e9
                if r.is_error:
                    if r.payload["error"]["code"] != "conversation_not_found":
                        agg["errors"] += 1
                        print("error", r.payload)
                        continue
                    v = None
                else:
                    v = int(r.payload["inputs"][0]["content"][1:])
                records.append((k, "inputs", {i: v}, None, t0, time.time_ns(), done.value))
            agg["max_call"] = max(agg["max_call"], dt)
            agg["slow100"] = agg.get("slow100", 0) + (dt > 0.1)
            agg["slow500"] = agg.get("slow500", 0) + (dt > 0.5)

    ths = [threading.Thread(target=caller, args=(7 + n,)) for n in range(int(os.environ.get("CALLERS", "1")))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    max_call = agg["max_call"]
    errors = agg["errors"]
    stop.set()
    log, counts = logq.get()
    p.join()
    cookies = w.cookies_sent - c0
    same_watcher = svc.watcher is w
    svc.close()
    # history per id
    hist = {i: [(0, initial.get(i))] for i in IDS}
    for op, changes, _at in log:
        for i, v in changes:
            hist[i].append((op, v))
    ops = {i: [op for op, _ in hist[i]] for i in IDS}
    stale = []
    for k, kind, ans, path, ta, tb, kend in records:
        for i, v in ans.items():
            h = hist[i]
            floor = bisect.bisect_right(ops[i], k) - 1
            if all(val != v for _, val in h[floor : floor + 50]) and all(val != v for _, val in h[floor:]):
                stale.append(
                    (
                        k,
                        kind,
                        i,
                        v,
                        h[max(0, floor - 2) : floor + 2],
                        "sync(ok,drained)=",
                        path,
                        f"dur={(tb - ta) / 1e6:.2f}ms",
                        "done at end",
                        kend,
                        ta,
                        tb,
                    )
                )
    print(
        f"watchdog {watchdog.version.VERSION_STRING} mode={MODE} calls={len(records)} "
        f"(list={sum(1 for r in records if r[1] == 'list')}) writes={len(log)} {counts}"
    )
    print(
        f"stale={len(stale)} errors={errors} cookies_sent={cookies} stats={stats} "
        f"max_call={max_call * 1000:.1f}ms slow>100ms={agg.get('slow100')} slow>500ms={agg.get('slow500')} same_watcher={same_watcher}"
    )
    for n, s in enumerate(stale[:10]):
        print("STALE", s)
        if TRACING and n < 4:
            print_trace(s, log)


if __name__ == "__main__":
    main()
