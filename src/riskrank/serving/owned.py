"""A bounded table that one caller cannot empty of another's entries: the gateway's session
records and exposures (keyed by session key), and the HTTP gate's record of who opened which
MCP session (keyed by session id)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

_MISSING = object()


class OwnedTable:
    """The latest ``limit`` entries, each with an owner (the caller it belongs to: given to
    :meth:`put`, else ``owner_of(key)``), where a caller who adds many pushes out its own
    oldest, never another caller's: past the bound, the oldest entry of the owner holding the
    most goes. (One LRU over every entry let one client's flood of new conversations or MCP
    sessions wipe another client's anchor, flow record and approvals, or its session's owner.)"""

    def __init__(self, limit: int, owner_of: Callable[[str], Any] | None = None) -> None:
        self.limit = limit
        self.owner_of = owner_of
        self._owners: dict[Any, collections.OrderedDict[Any, Any]] = {}
        self._where: dict[Any, Any] = {}  # key -> its owner

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self._where:
            return default
        return self._owners[self._where[key]][key]

    def __getitem__(self, key: Any) -> Any:
        got = self.get(key, _MISSING)
        if got is _MISSING:
            raise KeyError(key)
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __len__(self) -> int:
        return len(self._where)

    def pop(self, key: Any, default: Any = None) -> Any:
        owner = self._where.pop(key, _MISSING)
        if owner is _MISSING:
            return default
        entries = self._owners[owner]
        value = entries.pop(key)
        if not entries:
            del self._owners[owner]
        return value

    def put(self, key: Any, value: Any, owner: Any = _MISSING) -> list[Any]:
        """Keep ``value`` under ``key`` (the newest of its owner's); an entry's owner is the
        one it was first put with. Returns the keys pushed out to make room (the caller may
        hold more for them than this table: the HTTP gate closes the MCP sessions it forgets)."""
        if key in self._where:
            owner = self._where[key]
        elif owner is _MISSING:
            if self.owner_of is None:
                raise TypeError("OwnedTable.put: no owner given and no owner_of")
            owner = self.owner_of(key)
        entries = self._owners.setdefault(owner, collections.OrderedDict())
        self._where[key] = owner
        entries[key] = value
        entries.move_to_end(key)
        evicted = []
        while len(self._where) > self.limit:
            most_owner, most = max(self._owners.items(), key=lambda kv: len(kv[1]))
            oldest, _ = most.popitem(last=False)
            del self._where[oldest]
            evicted.append(oldest)
            if not most:
                del self._owners[most_owner]
        return evicted
