"""ListOffsets' special timestamps (Kafka's `ListOffsetsRequest` constants): a partition asked
with one of these gets an offset instead of the first offset at or after a time. The Spark
connector's offset options use the same -2 / -1 for earliest / latest."""
from __future__ import annotations

LATEST_TIMESTAMP = -1               # the log end offset (the HW or LSO for a client)
EARLIEST_TIMESTAMP = -2             # the log start offset
MAX_TIMESTAMP = -3                  # the offset of the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4       # KIP-405: the local log start offset (a tiered follower asks it)
