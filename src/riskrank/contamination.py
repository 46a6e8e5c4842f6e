"""Which evaluation queries a checkpoint trained on.

A checkpoint records a short digest of every task text it trained on (the sidecar's
``training_data.query_sha256``); an evaluation compares its own tasks' digests with them, so
a model is never scored on the queries that fitted it without saying so. Texts are compared
after collapsing whitespace and case (``"Delete  the logs"`` and ``"delete the logs"`` are
one task): a copy that differs only in spacing or capitals is still the same query.

Sixteen hex digits (64 bits) of sha256 keep the sidecar small (a few hundred kB for tens of
thousands of queries) with no realistic chance of two different tasks sharing a digest, and
do not store the task texts themselves in a file that may be shipped. Standard library only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

#: Hex digits kept of each task's sha256.
DIGEST_CHARS = 16


def normalise_task(task: str) -> str:
    """The form a task is digested in: whitespace runs collapsed to one space, case folded."""
    return " ".join(task.split()).casefold()


def task_digest(task: str) -> str:
    """The first :data:`DIGEST_CHARS` hex digits of sha256 over the normalised task (UTF-8)."""
    return hashlib.sha256(normalise_task(task).encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def query_digests(tasks: Iterable[str]) -> list[str]:
    """The sorted, distinct digests of ``tasks``: what a checkpoint records."""
    return sorted({task_digest(t) for t in tasks})


def is_digest(value: object) -> bool:
    """True for a string of :data:`DIGEST_CHARS` lower-case hex digits."""
    return (isinstance(value, str) and len(value) == DIGEST_CHARS
            and all(c in "0123456789abcdef" for c in value))


def seen_mask(tasks: Sequence[str], digests: Iterable[str]) -> list[bool]:
    """For each of ``tasks``, whether its digest is among ``digests`` (a checkpoint's)."""
    known = set(digests)
    return [task_digest(t) in known for t in tasks]


def overlap(tasks: Sequence[str], others: Sequence[str]) -> int:
    """How many of ``tasks`` are also in ``others`` (after normalisation)."""
    return sum(seen_mask(tasks, query_digests(others)))
