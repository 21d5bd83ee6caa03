"""The broker's metrics: one Prometheus registry per broker (not prometheus_client's global one,
so that several brokers in one process stay apart), Kafka's metric names as the Prometheus JMX
exporter's Kafka rules spell them, and the HTTP endpoint (`metrics.listener`). docs/metrics.md
lists every metric.

Counters moved on the data path (requests, bytes in and out) cost a dictionary look-up and an
addition per request or per batch; the state an operator watches (under-replicated partitions,
the controller, ISR changes, elections, flushes, the cleaner, consumer lag, connections) is read
from the broker's objects when Prometheus scrapes (broker_state.py). This package imports no
other part of seglog above the wire layer: the broker hands it the objects it reads.
"""
