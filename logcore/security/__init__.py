"""Who is on the other end of a connection: listeners and their security protocols, TLS
contexts from Kafka's ssl.* settings, SASL mechanisms (PLAIN, SCRAM-SHA-256/512), SCRAM
credentials, and the principal a connection authenticates as (docs/security.md)."""
