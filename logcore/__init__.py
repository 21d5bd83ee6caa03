"""logcore: seglog's storage engine, byte-compatible with Apache Kafka's on-disk log format."""
__version__ = "0.1.0"
