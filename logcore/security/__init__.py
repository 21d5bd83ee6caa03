"""Security: who is on the other end of a connection (listeners and their security protocols,
TLS contexts from Kafka's ssl.* settings, SASL mechanisms PLAIN and SCRAM-SHA-256/512, SCRAM
credentials, the principal a connection authenticates as) and what it may do (Kafka's ACL
model and the authorizer). docs/security.md.
"""
