"""The Kafka client settings a pipeline passes as `kafka.<setting>`, as Spark's Kafka source and
sink take them.

The connector runs no Kafka consumer or producer, so most of these settings tune a client that is
not there. A pipeline moving from `format("kafka")` keeps them, so a real Kafka client setting is
accepted; one the connector does not apply is named in a warning when the query starts (never
dropped unseen), and a name that is not a Kafka client setting at all (a typo such as
`kafka.bootstrap.server`) is refused with the closest real one. The names are Kafka 4.1's
ConsumerConfig and ProducerConfig.
"""
from __future__ import annotations

import difflib
import logging

from logcore.errors import InvalidConfigError

PREFIX = "kafka."
log = logging.getLogger("pyspark_seglog")

# Both clients: connection, security and metrics settings (CommonClientConfigs and the ssl/sasl
# families).
_COMMON = (
    "bootstrap.servers", "client.dns.lookup", "client.id", "connections.max.idle.ms",
    "enable.metrics.push", "metadata.max.age.ms", "metadata.recovery.rebootstrap.trigger.ms",
    "metadata.recovery.strategy", "metric.reporters", "metrics.num.samples", "metrics.recording.level",
    "metrics.sample.window.ms", "receive.buffer.bytes", "reconnect.backoff.max.ms", "reconnect.backoff.ms",
    "request.timeout.ms", "retry.backoff.max.ms", "retry.backoff.ms", "security.protocol",
    "security.providers", "send.buffer.bytes", "socket.connection.setup.timeout.max.ms",
    "socket.connection.setup.timeout.ms", "interceptor.classes",
    "sasl.client.callback.handler.class", "sasl.jaas.config", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms",
    "sasl.mechanism",
    "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.endpoint.identification.algorithm",
    "ssl.engine.factory.class", "ssl.key.password", "ssl.keymanager.algorithm",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.type", "ssl.protocol", "ssl.provider", "ssl.secure.random.implementation",
    "ssl.trustmanager.algorithm", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.type",
)
CONSUMER_SETTINGS = frozenset(_COMMON + (
    "allow.auto.create.topics", "auto.commit.interval.ms", "auto.offset.reset", "check.crcs", "client.rack",
    "default.api.timeout.ms", "enable.auto.commit", "exclude.internal.topics", "fetch.max.bytes",
    "fetch.max.wait.ms", "fetch.min.bytes", "group.id", "group.instance.id", "group.protocol",
    "group.remote.assignor", "heartbeat.interval.ms", "isolation.level", "key.deserializer",
    "max.partition.fetch.bytes", "max.poll.interval.ms", "max.poll.records", "partition.assignment.strategy",
    "session.timeout.ms", "share.acknowledgement.mode", "value.deserializer",
))
PRODUCER_SETTINGS = frozenset(_COMMON + (
    "acks", "batch.size", "buffer.memory", "compression.gzip.level", "compression.lz4.level",
    "compression.type", "compression.zstd.level", "delivery.timeout.ms", "enable.idempotence",
    "key.serializer", "linger.ms", "max.block.ms", "max.in.flight.requests.per.connection",
    "max.request.size", "metadata.max.idle.ms", "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms", "partitioner.class", "partitioner.ignore.keys", "retries",
    "transaction.timeout.ms", "transaction.two.phase.commit.enable", "transactional.id", "value.serializer",
))


def setting_of(option: str) -> str | None:
    """`kafka.<setting>` -> `<setting>` (lower case); None for an option without the prefix."""
    low = option.lower()
    return low[len(PREFIX):] if low.startswith(PREFIX) else None


def check_known(option: str, settings: frozenset, client: str, user: str) -> None:
    """InvalidConfigError unless `kafka.<setting>` names a real Kafka `client` setting."""
    setting = setting_of(option)
    if setting in settings:
        return
    close = difflib.get_close_matches(setting, sorted(settings), n=1, cutoff=0.75)
    hint = f"; did you mean {PREFIX}{close[0]}?" if close else ""
    raise InvalidConfigError(
        f"option {option} is not a Kafka {client} setting{hint} ({user} takes the Kafka {client}'s"
        f" settings as kafka.<setting>, as Spark's Kafka connector does)")


def warn_inert(options, applied, client: str, user: str) -> list[str]:
    """Log, once for these options, the `kafka.*` settings `user` accepts but does not apply
    (`applied(setting)` says which it applies); returns their option names."""
    inert = sorted(name for name in options
                   if (s := setting_of(name)) is not None and options[name] is not None and not applied(s))
    if inert:
        log.warning("%s: option(s) %s tune Kafka's %s, which %s does not run: accepted so that a"
                    " format(\"kafka\") pipeline runs unchanged, and without effect here",
                    user, ", ".join(inert), client, user)
    return inert
