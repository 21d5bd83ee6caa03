"""A log root written before its broker starts with transactions that never ended: what a
transaction coordinator that lost its state (or a producer whose coordinator never heard of its
transaction) leaves behind, for `kafka-transactions find-hanging` / `abort`."""
from __future__ import annotations

import time
from pathlib import Path

from logcore.log.log_root import LogRoot

TOPIC = "hang"
PLAIN = 2                     # plain records before each open transaction: its first offset
OPEN = 3                      # records of each open transaction
HANGING = {0: (4242, 3), 1: (4243, 0)}    # partition -> (producer id, epoch)
AGE_MS = 3600_000             # their records are stamped an hour ago (find-hanging's default: 15 min)


def write_hanging_root(root_dir: Path) -> None:
    """Topic `hang`, 2 partitions: each holds PLAIN plain records, then OPEN records of an open
    transaction of its HANGING producer (sequences 0..2), stamped AGE_MS ago."""
    root = LogRoot.open(str(root_dir), create=True)
    root.create_topic(TOPIC, len(HANGING), {})
    old = int(time.time() * 1000) - AGE_MS
    for p, (pid, epoch) in HANGING.items():
        log = root.log(TOPIC, p, writer=True)
        log.append_records([(None, b"plain", (), None)] * PLAIN)
        log.append_records([(b"k", b"open", (), old)] * OPEN, producer_id=pid, producer_epoch=epoch,
                           base_sequence=0, is_transactional=True)
        log.commit()
        log.close()
    root.close()
