"""Spark's Kafka security options (`kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*`)
on the connector's broker path: refused by name until the connector's broker client carries
them (the seglog broker and logcore's client speak TLS and SASL; the connector's reads and
writes through kafka.bootstrap.servers do not pass them on yet), rather than accepted and
ignored. `kafka.security.protocol=PLAINTEXT` is what the connector does and is accepted."""
from __future__ import annotations

from logcore.errors import InvalidConfigError


def check_security_option(name: str, value) -> None:
    """InvalidConfigError for a kafka.* security option the connector cannot apply."""
    setting = name.lower()[len("kafka."):] if name.lower().startswith("kafka.") else name.lower()
    if setting == "security.protocol":
        if str(value).strip().upper() == "PLAINTEXT":
            return
        raise InvalidConfigError(
            f"option {name}={value}: the connector reaches brokers over PLAINTEXT only for now (TLS and SASL"
            " are served by `seglog broker` and spoken by the seglog CLI, not yet by the connector's broker"
            " path); use a PLAINTEXT listener reachable from the Spark cluster, or read/write the log root"
            " by path")
    if setting.startswith(("ssl.", "sasl.")):
        raise InvalidConfigError(
            f"option {name}: the connector reaches brokers over PLAINTEXT only for now, so TLS and SASL"
            " settings cannot be applied (refused rather than ignored)")
