"""The request batcher: every caller gets its own result, batched with concurrent callers of
the same key, a bad item fails alone, and a batch of tasks ranks like the tasks one by one."""

from __future__ import annotations

import threading
import time

import pytest

from riskrank.batching import Batcher


def test_concurrent_callers_share_batches_and_get_their_own_results():
    seen: list[tuple] = []
    gate = threading.Event()

    def run(key, items):
        seen.append((key, list(items)))
        gate.wait(5)  # the first batch holds the lock while the others queue up
        return [f"{key}:{x}" for x in items]

    b = Batcher(run)
    out: dict[int, str] = {}

    def call(i: int) -> None:
        out[i] = b.submit("a" if i % 2 else "b", i)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(9)]
    threads[0].start()
    while not seen:  # the first caller is running alone
        time.sleep(0.01)
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert out == {i: f"{'a' if i % 2 else 'b'}:{i}" for i in range(9)}
    assert seen[0] == ("b", [0])  # a caller alone runs at once
    assert b.items == 9 and b.calls < 9  # the rest were batched, one call per key
    assert all(len({k for k, _ in seen[1:] if k == key}) <= 1 for key in "ab")


def test_a_failing_item_fails_alone():
    def run(key, items):
        if "bad" in items:
            raise ValueError("bad item")
        return [x.upper() for x in items]

    b = Batcher(run)
    results: dict[str, object] = {}
    from concurrent.futures import Future

    futs = [(x, Future()) for x in ("ok", "bad", "fine")]
    b._run_group("k", futs)
    for x, f in futs:
        results[x] = f.exception() or f.result()
    assert results["ok"] == "OK" and results["fine"] == "FINE" and isinstance(results["bad"], ValueError)
    with pytest.raises(ValueError, match="bad item"):
        b.submit("k", "bad")


def test_a_batch_of_tasks_ranks_like_each_task(demo_fitted):
    """retrieve_many (what batched requests run) gives each task the ranking it gets alone."""
    r = demo_fitted
    tasks = ["delete the old log files", "send an email to Alice", "what is the weather in Lisbon", "read my notes file"]
    alone = [[t.name for t in r.retrieve(task, k=5).tools] for task in tasks]
    together = [[t.name for t in res.tools] for res in r.retrieve_many(tasks, k=5)]
    assert together == alone


def test_batches_are_cut_by_size():
    """With ``size`` (the encoder's: texts per request), a call holds at most ``max_items`` of
    it; a request larger than that runs alone."""
    calls: list[list[int]] = []
    gate = threading.Event()

    def run(key, items):
        calls.append([len(x) for x in items])
        gate.wait(5)
        return [len(x) for x in items]

    b = Batcher(run, max_items=4, size=len)
    first = threading.Thread(target=b.submit, args=(None, ["first"]))
    first.start()
    while not calls:  # the first request runs alone and holds the lock
        time.sleep(0.01)
    requests = [["a", "b"], ["c"], ["d", "e"], ["f"] * 6, ["g"]]
    out: dict[int, int] = {}
    threads = []
    for i, r in enumerate(requests):  # queued in this order while the lock is held
        t = threading.Thread(target=lambda i=i, r=r: out.__setitem__(i, b.submit(None, r)))
        t.start()
        threads.append(t)
        while b._queue.qsize() < i + 1:
            time.sleep(0.01)
    gate.set()
    for t in [first, *threads]:
        t.join(10)
    assert out == {i: len(r) for i, r in enumerate(requests)}
    assert calls == [[1], [2, 1], [2], [6], [1]]
