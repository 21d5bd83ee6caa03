"""Producer ids for idempotent producers, unique across broker restarts (and, in a cluster,
across brokers).

Ids are handed out from blocks: before the first id of a block is used, the end of the block is
written to `seglog-producer-ids.json` in the log root (atomically), so a restart, even after a
crash, continues after every id that may have been given out. A cluster member takes its blocks
from ZooKeeper instead (Kafka's /latest_producer_id_block, claimed with a compare-and-set), so no
two brokers ever hand out the same id: a new leader would otherwise take one producer's batches
for another's duplicates.
"""
from __future__ import annotations

import json

from logcore.errors import CorruptIndexError

PRODUCER_IDS_FILE = "seglog-producer-ids.json"
BLOCK = 1000
MAX_EPOCH = 32767


class ProducerIdAllocator:
    def __init__(self, storage, *, block: int = BLOCK):
        self.storage = storage
        self.block = block
        self._next = 0
        self._limit = 0
        if storage.exists(PRODUCER_IDS_FILE):
            raw = storage.read(PRODUCER_IDS_FILE)
            try:
                doc = json.loads(raw)
                self._next = self._limit = int(doc["next_block_start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptIndexError(f"cannot read the producer id block: {exc}",
                                        file=f"{storage.url}/{PRODUCER_IDS_FILE}") from None

    def allocate(self) -> int:
        if self._next >= self._limit:
            limit = self._next + self.block
            self.storage.write_atomic(PRODUCER_IDS_FILE,
                                      json.dumps({"next_block_start": limit}).encode())
            self._limit = limit
        pid = self._next
        self._next += 1
        return pid


class ClusterProducerIdAllocator:
    """Producer ids from blocks claimed in ZooKeeper (ZooKeeperStore.claim_producer_id_block)."""

    def __init__(self, store, broker_id: int, *, block: int = BLOCK):
        self.store = store
        self.broker_id = broker_id
        self.block = block
        self._next = 0
        self._limit = 0

    def allocate(self) -> int:
        if self._next >= self._limit:
            start, end = self.store.claim_producer_id_block(self.broker_id, self.block)
            self._next, self._limit = start, end + 1
        pid = self._next
        self._next += 1
        return pid
