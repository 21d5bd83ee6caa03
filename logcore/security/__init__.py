"""Security: listeners, TLS, SASL, credentials, the authorizer (ACLs) and quotas."""
