"""One partition a Fetch asks for, as the broker's checks left it (Kafka's FetchPartitionData
request side): built by the Fetch handler, checked by the cluster (cluster_fetch.py), read by
_read_all."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WantedPartition:
    name: str | None             # None: a topic id this broker does not know
    topic_id: object             # uuid.UUID, as the response names the topic
    request: object              # the request's partition entry, or a cluster_fetch.DivergedPartition
    part: object                 # partition_log.PartitionLog, None when not served here
    error: int                   # the error code it is answered with (NONE: read it)

    @property
    def key(self) -> tuple[str | None, int]:
        return self.name, self.request.partition

    def refused(self, error: int) -> "WantedPartition":
        """The same partition, answered `error` instead."""
        return WantedPartition(self.name, self.topic_id, self.request, self.part, error)

    def asking(self, request) -> "WantedPartition":
        """The same partition with another request entry (a DivergedPartition)."""
        return WantedPartition(self.name, self.topic_id, request, self.part, self.error)
