"""The sidecar broker: serves a log root over the Kafka protocol (`seglog broker`)."""
