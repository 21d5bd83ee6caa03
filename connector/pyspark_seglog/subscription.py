"""The subscribed partitions as a cluster has them now: the source's `assign`, `subscribe` or
`subscribePattern` option answered from the brokers' Metadata (internal topics only when named)."""
from __future__ import annotations

from logcore.wire.error_codes import NONE


def subscribed_partitions(opts, client) -> list:
    """[(topic, partition)] of `opts`' subscription that `client` (a BrokerClient) finds."""
    if opts.strategy == "assign":
        topics = sorted({t for t, _p in opts.assigned})
    elif opts.strategy == "subscribe":
        topics = sorted(opts.topics)
    else:
        topics = None
    codes = client.metadata(topics)
    if opts.strategy == "assign":
        return [tp for tp in opts.assigned if tp in client.partitions]
    names = {t for t, code in codes.items() if code == NONE and t is not None
             and (opts.strategy == "subscribe" or (opts.matches(t) and not t.startswith("__")))}
    return sorted(tp for tp in client.partitions if tp[0] in names)
