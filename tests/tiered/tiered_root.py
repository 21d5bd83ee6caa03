"""Building log roots tiered to a remote root, for the integration tests (tiered and Spark)."""
from __future__ import annotations

import json
from typing import Any

from logcore.log.log import Log
from logcore.log.log_root import LogRoot
from logcore.tiered import install_remote_tier
from logcore.records.control import ControlType

install_remote_tier()  # roots that enable tiering have a remote tier

TXN_PRODUCER = 7


def flatten_storage_options(options: dict[str, Any], prefix: str = "rsm.config.storage.") -> dict[str, str]:
    """fsspec options -> rsm.config.storage.* settings (dotted names for nested dicts)."""
    flat: dict[str, str] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            flat.update(flatten_storage_options(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value if isinstance(value, str) else json.dumps(value)
    return flat


def tiering_defaults(remote_url: str, remote_options: dict[str, Any] | None = None,
                     **rsm: str) -> dict[str, str]:
    defaults = {"remote.log.storage.system.enable": "true", "rsm.config.storage.url": remote_url,
                "rsm.config.chunk.size": "16384"}
    defaults.update(flatten_storage_options(remote_options or {}))
    defaults.update({f"rsm.config.{k.replace('_', '.')}": v for k, v in rsm.items()})
    return defaults


def produce(log: Log, batches: int, *, start: int = 0, per_batch: int = 10, value_size: int = 200,
            aborted_every: int = 0) -> None:
    """Batches of keyed records, committed one by one; every `aborted_every`-th batch is a
    transaction that is aborted (read_committed readers never see it)."""
    sequence = 0
    for b in range(start, start + batches):
        records = [(b"k%d" % (b * per_batch + i), (b"v%d-" % (b * per_batch + i)).ljust(value_size, b"x"),
                    (), None) for i in range(per_batch)]
        if aborted_every and b % aborted_every == aborted_every - 1:
            log.append_records(records, producer_id=TXN_PRODUCER, producer_epoch=0,
                               base_sequence=sequence, is_transactional=True)
            sequence += per_batch
            log.append_control(ControlType.ABORT, producer_id=TXN_PRODUCER, producer_epoch=0)
        else:
            log.append_records(records)
        log.commit()


def all_batches(log: Log, start: int, isolation: str = "read_uncommitted", max_bytes: int = 1 << 20) -> bytes:
    """Every batch from `start` to the bound, by chained Log.read calls."""
    from logcore.records.batch import iter_batches
    out = bytearray()
    offset = start
    while True:
        fetch = log.read(offset, max_bytes, isolation=isolation)
        if not fetch.data:
            return bytes(out)
        out += fetch.data
        *_, (_pos, last) = iter_batches(fetch.data)
        offset = last.next_offset


def open_writer(root: LogRoot, topic: str, partition: int = 0) -> Log:
    return root.log(topic, partition, writer=True)
