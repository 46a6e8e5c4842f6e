"""Concurrent requests' work, run as batches: the servers' retrievals and encodings.

A server answers many small requests at once, and on a CPU a batch is cheaper than its parts:
measured on UltraTool's 2,032 tools (2 cores, the base model, ``core+graph+rule``), eight
tasks through one ``retrieve_many`` cost 39 ms, eight ``retrieve`` calls 80 ms (one encoder
pass, one first stage, one head product, one rule pass per batch instead of per task).

:class:`Batcher` needs no window, so a request alone waits for nothing: each caller queues its
item and takes the lock; whoever holds it runs everything queued so far (its own item
included), grouped by key, one call per group, and hands each caller its result; a caller
that finds its result ready when it gets the lock skips the work. Under load the work runs in
fewer, larger batches, never in two threads at once.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class Batcher:
    """``submit(key, item)`` -> ``run(key, items)[i]`` for this caller's item, batched with
    other callers' items of the same key (a call holds at most ``max_items`` of ``size``: one
    per item by default; an item larger than that alone runs alone). A batch that fails is run
    again item by item, so one bad request does not fail its batch-mates."""

    def __init__(self, run: Callable[[Hashable, Sequence[Any]], Sequence[Any]], max_items: int = 32,
                 size: Callable[[Any], int] = lambda item: 1) -> None:
        self.run = run
        self.max_items = max_items
        self.size = size
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        #: Held while a batch runs (and by whoever must not run beside one).
        self.lock = threading.Lock()
        #: Calls made and items run (how well requests batch, for tests and benchmarks).
        self.calls = self.items = 0

    def submit(self, key: Hashable, item: Any) -> Any:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((key, item, fut))
        with self.lock:
            if not fut.done():  # nobody took it yet: run everything waiting, ours included
                pending: dict[Hashable, list[tuple[Any, concurrent.futures.Future]]] = {}
                while True:
                    try:
                        k, it, f = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    pending.setdefault(k, []).append((it, f))
                for k, group in pending.items():
                    chunk: list[tuple[Any, concurrent.futures.Future]] = []
                    weight = 0
                    for entry in group:
                        w = self.size(entry[0])
                        if chunk and weight + w > self.max_items:
                            self._run_group(k, chunk)
                            chunk, weight = [], 0
                        chunk.append(entry)
                        weight += w
                    if chunk:
                        self._run_group(k, chunk)
        return fut.result()

    def _run_group(self, key: Hashable, group: list[tuple[Any, concurrent.futures.Future]]) -> None:
        self.calls += 1
        self.items += len(group)
        try:
            out = self.run(key, [it for it, _ in group])
        except BaseException as exc:
            if len(group) == 1:
                group[0][1].set_exception(exc)
                return
            for it, fut in group:  # isolate the bad one
                try:
                    fut.set_result(self.run(key, [it])[0])
                except BaseException as one:
                    fut.set_exception(one)
            return
        for (_, fut), res in zip(group, out, strict=True):
            fut.set_result(res)
