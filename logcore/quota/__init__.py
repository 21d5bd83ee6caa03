"""Quotas: client quotas by user and client id (the entities and their settings, where they are
kept, the rates a broker measures and the throttle times it answers) and the replication
throttles of reassignments. The broker wires them in; nothing here knows the broker."""
