"""What an object store's reads answered, kept to answer them again without a request.

A Spark source's driver opens the root and its logs to plan a query; each task then opens the
same root to read one offset range, and used to ask the store again for everything the driver
had just read (the root and partition listings, the topics file, the partition state, the last
segment's indexes and tail: 19 requests, 15 round trips on S3 before its first byte). With
`ReadFacts` the driver records those answers and hands the ones of a partition to its task
(`for_folder`, pickled in the task's partition); the task's storage answers from them, and
asks the store only for what is not there (then remembers it for the rest of its open, so one
open never asks twice).

Two policies, named: `RECORD` (a planner that must see the latest state: a read asks the store
and keeps the answer, unless the same thing was read in the current round, which the planner
starts with `new_round()` at each planning call) and `REPLAY` (a kept answer is given back: a
task's open).

When a kept answer is stale: segment objects are immutable on an object store (a deleted or
replaced one stays `file.delete.delay.ms`, for readers that hold it) and a task's range lies
below the HW the driver planned from, so the facts of its range stay true; a segment that is
gone meanwhile shows as ResourceNotFoundError on its read, and the task opens again without
facts (pyspark_seglog.partition_reader). Only small objects and ranges are kept (the indexes
of a 1 GB segment are 2 MB: read again, not shipped to every task).
"""
from __future__ import annotations

from typing import Callable


RECORD = "record"
REPLAY = "replay"

# What one task's facts may carry: each object or range at most this, all at most FOLDER_BUDGET.
MAX_KEPT_BYTES = 256 << 10
FOLDER_BUDGET = 1 << 20
# What a recording planner keeps of bytes at most (it runs for the whole query): oldest go first.
RECORD_BUDGET = 16 << 20
# Ranged reads kept: only of immutable segment objects (a writer rewrites none below the HW).
_IMMUTABLE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


class ReadFacts:
    """Answers of listings, whole-object reads, sizes and ranged reads of immutable objects."""

    def __init__(self, policy: str = REPLAY):
        if policy not in (RECORD, REPLAY):
            raise ValueError(f"ReadFacts policy must be {RECORD!r} or {REPLAY!r}, got {policy!r}")
        self.policy = policy
        self._listings: dict[str, list[str]] = {}          # folder -> names in it
        self._objects: dict[str, tuple[bytes, str | None] | None] = {}  # None: absent
        self._sizes: dict[str, int] = {}
        self._ranges: dict[tuple[str, int, int], bytes] = {}
        self._kept = 0                  # bytes in _objects and _ranges
        self._this_round: set = set()   # RECORD: (table name, key) read since new_round()

    def _known(self, table: dict, key) -> bool:
        if key not in table:
            return False
        return self.policy == REPLAY or (id(table), key) in self._this_round

    def _read_now(self, table: dict, key) -> None:
        if self.policy == RECORD:
            self._this_round.add((id(table), key))

    def new_round(self) -> None:
        """RECORD: what was read so far is not answered again (a new planning call)."""
        self._this_round.clear()

    # -- listings
    def listing(self, folder: str, ask: Callable[[], dict[str, int | None]]) -> list[str]:
        """Names in `folder`; `ask` lists it: {name: size or None for a sub-folder}."""
        if self._known(self._listings, folder):
            return list(self._listings[folder])
        found = ask()
        self._listings[folder] = sorted(found)
        self._read_now(self._listings, folder)
        for name, size in found.items():
            if size is not None:
                path = f"{folder}/{name}" if folder else name
                self._sizes[path] = size
                self._read_now(self._sizes, path)
        return sorted(found)

    def exists(self, path: str, ask: Callable[[], bool]) -> bool:
        if self._known(self._objects, path):
            return self._objects[path] is not None
        if self._known(self._listings, path) and self._listings[path]:
            return True                 # a folder with something in it
        folder, _, name = path.rpartition("/")
        if self._known(self._listings, folder):
            return name in self._listings[folder]
        return ask()

    # -- objects
    def whole(self, path: str, ask: Callable[[], tuple[bytes, str | None] | None], *,
              versioned: bool = False) -> tuple[bytes, str | None] | None:
        """(content, version or None) of a whole object, None when absent; `versioned`: a kept
        answer without its version is asked again."""
        if self._known(self._objects, path):
            found = self._objects[path]
            if not (versioned and found is not None and found[1] is None):
                return found
        found = ask()
        if found is None or len(found[0]) <= MAX_KEPT_BYTES:
            self._keep(self._objects, path, found, 0 if found is None else len(found[0]))
            self._read_now(self._objects, path)
        if found is not None:
            self._sizes[path] = len(found[0])
        return found

    def read_range(self, path: str, start: int, end: int | None, ask: Callable[[], bytes]) -> bytes:
        """Bytes [start, end) of an object (a whole one kept answers any range of it)."""
        known = self._objects[path] if self._known(self._objects, path) else None
        if known is not None:
            return known[0][start:end]
        key = (path, start, end)
        # Bytes of an immutable segment object are the same in every round.
        if key in self._ranges:
            return self._ranges[key]
        data = ask()
        if end is not None and path.endswith(_IMMUTABLE_SUFFIXES) and len(data) <= MAX_KEPT_BYTES:
            self._keep(self._ranges, key, data, len(data))
            self._read_now(self._ranges, key)
        return data

    def _keep(self, table: dict, key, value, size: int) -> None:
        old = table.pop(key, None)
        self._kept += size - (len(old[0] if isinstance(old, tuple) else old) if old else 0)
        table[key] = value              # newest last: the oldest go first below
        while self._kept > RECORD_BUDGET:
            victim = self._ranges if self._ranges else self._objects
            _key, gone = next(iter(victim.items()))
            del victim[_key]
            self._kept -= len(gone[0] if isinstance(gone, tuple) else gone) if gone else 0

    def size(self, path: str, ask: Callable[[], int]) -> int:
        if self._known(self._sizes, path):
            return self._sizes[path]
        size = ask()
        self._sizes[path] = size
        self._read_now(self._sizes, path)
        return size

    def settle(self) -> None:
        """An open is done: from now on only the sizes and bytes of immutable segment objects
        answer (a later refresh must see a new listing, partition state, a deleted segment)."""
        self._listings.clear()
        self._objects.clear()
        self._kept = sum(len(d) for d in self._ranges.values())
        self._sizes = {p: s for p, s in self._sizes.items() if p.endswith(_IMMUTABLE_SUFFIXES)}

    # -- handing on
    def for_folder(self, folder: str) -> "ReadFacts":
        """A replaying copy of what concerns `folder` (a partition's) and the root's own files:
        what a task reading that partition asks at its open. Within FOLDER_BUDGET bytes."""
        prefix = folder.rstrip("/") + "/"
        out = ReadFacts(REPLAY)
        for key in ("", folder):
            if key in self._listings:
                out._listings[key] = list(self._listings[key])
        budget = FOLDER_BUDGET

        def mine(path: str) -> bool:
            return path.startswith(prefix) or "/" not in path

        for path, found in self._objects.items():
            if mine(path) and (found is None or len(found[0]) <= budget):
                out._objects[path] = found
                budget -= 0 if found is None else len(found[0])
        out._sizes = {p: s for p, s in self._sizes.items() if mine(p)}
        for key, data in self._ranges.items():
            if key[0].startswith(prefix) and len(data) <= budget:
                out._ranges[key] = data
                budget -= len(data)
        return out

