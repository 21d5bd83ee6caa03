"""Replica assignment without racks, as Kafka's AdminUtils.assignReplicasToBrokersRackUnaware.

Brokers are sorted by id. With n brokers, a start index and a replica shift, both drawn at random
in [0, n) unless fixed:

    for each partition p (counting from `start_partition`):
        if p > 0 and p % n == 0: shift += 1
        first = (p + start) % n
        replicas = [b[first]] + [b[(first + 1 + (shift + j) % (n - 1)) % n] for j in 0 .. rf-2]

The first replica is the preferred leader, so leaders go round-robin over the brokers; the shift
spreads the followers of a broker's partitions over the others. `assign_simple` is the plain
round-robin of the design notes (partition i on brokers i, i+1, ..., i+rf-1 mod n), kept for
deterministic tests and examples.
"""
from __future__ import annotations

import random
from collections.abc import Iterable

from logcore.errors import InvalidConfigError, InvalidReplicationFactorError


def _check(brokers: Iterable[int], partitions: int, replication_factor: int) -> list[int]:
    ids = sorted(set(int(b) for b in brokers))
    if len(ids) != len(list(brokers)):
        raise InvalidConfigError(f"broker ids must be distinct, got {list(brokers)}")
    if not isinstance(partitions, int) or partitions <= 0:
        raise InvalidConfigError(f"number of partitions must be larger than 0, got {partitions!r}")
    if not isinstance(replication_factor, int) or replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be larger than 0, got {replication_factor!r}")
    if replication_factor > len(ids):
        raise InvalidReplicationFactorError(
            f"replication factor: {replication_factor} larger than available brokers: {len(ids)}"
            f" (brokers {ids})")
    return ids


def assign_replicas(brokers: Iterable[int], partitions: int, replication_factor: int, *,
                    start_index: int | None = None, replica_shift: int | None = None,
                    start_partition: int = 0,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """{partition: [broker ids]} for partitions start_partition .. start_partition+partitions-1.

    `start_index` and `replica_shift` default to random values in [0, n) (Kafka fixes both to
    the same value when given a fixed start index; pass both to do the same). When adding
    partitions to a topic, Kafka passes start_partition = the current count and start_index =
    the position of partition 0's first replica among the sorted brokers.
    """
    brokers = list(brokers)
    ids = _check(brokers, partitions, replication_factor)
    n = len(ids)
    rng = rng or random.Random()
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if replica_shift is None else replica_shift
    if not 0 <= start < n or shift < 0:
        raise InvalidConfigError(f"start index {start} / replica shift {shift} out of range for {n} brokers")
    result: dict[int, list[int]] = {}
    p = max(0, start_partition)
    for _ in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        result[p] = replicas
        p += 1
    return result


def assign_simple(brokers: Iterable[int], partitions: int, replication_factor: int) -> dict[int, list[int]]:
    """Partition i's first replica on sorted broker i mod n, replica j on broker (i + j) mod n."""
    brokers = list(brokers)
    ids = _check(brokers, partitions, replication_factor)
    n = len(ids)
    return {i: [ids[(i + j) % n] for j in range(replication_factor)] for i in range(partitions)}


def check_assignment(assignment: dict[int, list[int]], brokers: Iterable[int] | None = None) -> None:
    """Reject a manual assignment Kafka would reject (INVALID_REPLICA_ASSIGNMENT): partitions
    0..P-1 without gaps, the same non-zero replica count everywhere, no broker twice in one
    partition, and (when `brokers` is given) only known brokers."""
    if not assignment:
        raise InvalidConfigError("replica assignment is empty")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidConfigError(f"partitions of a replica assignment must be 0..{len(assignment) - 1},"
                                 f" got {sorted(assignment)}")
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicationFactorError(
            f"all partitions must have the same non-zero number of replicas, got {sorted(sizes)}")
    known = None if brokers is None else set(brokers)
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidConfigError(f"partition {p} lists a broker twice: {replicas}")
        if known is not None and not set(replicas) <= known:
            raise InvalidConfigError(f"partition {p} uses unknown broker(s) "
                                     f"{sorted(set(replicas) - known)} (brokers {sorted(known)})")
