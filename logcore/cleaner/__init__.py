"""Log compaction: the offset map and the log cleaner (Kafka's LogCleaner)."""
