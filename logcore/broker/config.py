"""The broker's own settings (Kafka's broker property names), read from broker.properties.

A broker.properties file holds two kinds of lines: the broker settings declared here
(listeners, log.dirs, node.id, ...) and log defaults with Kafka's broker-level names
(log.segment.bytes, log.retention.hours, message.max.bytes, ...) that become the log root's
topic defaults for this broker, among them the root's tiered-storage settings
(remote.log.storage.system.enable, rsm.config.*; logcore.tiered.config). Any other name is an
error that names the file and the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from logcore.errors import InvalidConfigError
from logcore.log.config import (ConfigKey, ConfigType, Validator, unknown_message, at_least, between,
                                resolve_root_defaults)
from logcore.log.properties_file import load_properties
from logcore.security.listener import Listener
from logcore.security.security_config import SECURITY_KEYS, SecurityConfig, is_security_name
from logcore.tiered.config import TIERED_KEYS, TieredConfig


def _metrics_listener_validator():
    from logcore.log.config import Validator
    from logcore.metrics.endpoint import valid_listener
    return Validator(valid_listener, "empty (no metrics endpoint) or http://host:port, e.g. http://127.0.0.1:9404")


def _authorizer_validator():
    from logcore.log.config import Validator
    from logcore.security.authorizer import ACL_AUTHORIZER
    return Validator(lambda v: v in ("", ACL_AUTHORIZER),
                     f"empty (no authorization) or {ACL_AUTHORIZER} (ACLs in ZooKeeper as Kafka keeps them)")


def _auto_or_at_least(minimum: int):
    from logcore.log.config import Validator
    return Validator(lambda v: v == -1 or v >= minimum, f"-1 (automatic) or at least {minimum}")


# Kafka's replica selector class names (replica.selector.class): the one besides the default.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _selector_validator():
    from logcore.log.config import Validator
    return Validator(lambda v: v in ("", RACK_AWARE_SELECTOR),
                     f"empty (the leader serves every consumer) or {RACK_AWARE_SELECTOR}")


def _event_loop_validator():
    from logcore.broker.event_loop import LOOPS
    from logcore.log.config import Validator
    return Validator(lambda v: v in LOOPS, " or ".join(LOOPS))


def _known_assignors(values: tuple[str, ...]) -> bool:
    from logcore.coordinator.assignors import assignor_name
    try:
        return bool(values) and all(assignor_name(v) for v in values)
    except ValueError:
        return False


BROKER_KEYS: dict[str, ConfigKey] = {k.name: k for k in (
    ConfigKey("listeners", ConfigType.LIST, "PLAINTEXT://127.0.0.1:9092",
              "NAME://host:port,... the broker listens on, each NAME's security protocol from"
              " listener.security.protocol.map (docs/security.md); port 0 picks a free port (printed"
              " at start).", category="broker"),
    ConfigKey("advertised.listeners", ConfigType.LIST, "",
              "NAME://host:port,... given to clients in Metadata, by the listener they connected to;"
              " a listener not named here: its own address (with the bound port).",
              category="broker"),
    ConfigKey("log.dirs", ConfigType.LIST, "",
              "The log root this broker serves (one folder, a seglog log root; created if missing).",
              category="broker"),
    ConfigKey("log.dir", ConfigType.STRING, "kafka-logs",
              "The log root when log.dirs is not set (Kafka's name; Kafka's default folder name,"
              " relative to the working directory rather than under the system's temp folder).",
              category="broker"),
    ConfigKey("node.id", ConfigType.INT, -1, "This broker's id (node.id wins over broker.id).",
              category="broker"),
    ConfigKey("broker.id", ConfigType.INT, -1, "This broker's id when node.id is not set; -1: 0.",
              category="broker"),
    ConfigKey("num.partitions", ConfigType.INT, 1,
              "Partitions of a topic created without a count (auto-created or CreateTopics -1).",
              validator=at_least(1), category="broker"),
    ConfigKey("default.replication.factor", ConfigType.INT, 1,
              "Replication factor of topics created without one (auto-created, CreateTopics -1)."
              " Above 1 needs zookeeper.connect (a cluster): a single broker holds one replica.",
              validator=at_least(1), category="broker"),
    ConfigKey("zookeeper.connect", ConfigType.STRING, "",
              "host:port[,host:port...][/chroot] of the ZooKeeper ensemble that makes this broker a"
              " cluster member (metadata, controller, replication). Empty: a single broker serving"
              " its log root alone.", category="cluster"),
    ConfigKey("zookeeper.session.timeout.ms", ConfigType.INT, 18000,
              "ZooKeeper session timeout: a broker that is silent this long is taken for dead and"
              " its leaderships move.", validator=at_least(1), category="cluster"),
    ConfigKey("broker.failure.probe.enable", ConfigType.BOOLEAN, True,
              "seglog's own: the controller also takes a broker for dead, before its ZooKeeper"
              " session expires, when its listener refuses connections several times in a row (no"
              " process listening: it was killed); a timeout never counts, so a paused or"
              " unreachable broker still waits for its session. false: only session expiry.",
              category="cluster"),
    ConfigKey("offsets.topic.replication.factor", ConfigType.INT, 3,
              "Replication factor of __consumer_offsets in a cluster; its creation fails (consumer"
              " groups wait) until this many brokers are registered. A single broker uses 1.",
              validator=at_least(1), category="cluster"),
    ConfigKey("replica.lag.time.max.ms", ConfigType.LONG, 30000,
              "A follower that has not caught up with the leader's log end for this long leaves the"
              " ISR.", validator=at_least(1), category="cluster"),
    ConfigKey("replica.fetch.wait.max.ms", ConfigType.INT, 500,
              "Longest a follower's fetch waits at the leader for new data; below"
              " replica.lag.time.max.ms.", validator=at_least(0), category="cluster"),
    ConfigKey("replica.fetch.min.bytes", ConfigType.INT, 1,
              "Bytes a follower's fetch waits for at the leader (up to replica.fetch.wait.max.ms).",
              validator=at_least(1), category="cluster"),
    ConfigKey("replica.fetch.max.bytes", ConfigType.INT, 1048576,
              "Bytes a follower asks per partition in one fetch (at least one batch comes anyway).",
              validator=at_least(1), category="cluster"),
    ConfigKey("replica.fetch.response.max.bytes", ConfigType.INT, 10485760,
              "Bytes a follower asks for in one fetch response over all partitions.",
              validator=at_least(1), category="cluster"),
    ConfigKey("replica.fetch.backoff.ms", ConfigType.INT, 1000,
              "How long a follower waits before fetching a partition again after an error.",
              validator=at_least(0), category="cluster"),
    ConfigKey("replica.socket.timeout.ms", ConfigType.INT, 30000,
              "A follower's request to the leader fails after this long without an answer (at"
              " least replica.fetch.wait.max.ms).", validator=at_least(1), category="cluster"),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", ConfigType.LONG, 5000,
              "How often each replica's high watermark is written to replication-offset-checkpoint.",
              validator=at_least(1), category="cluster"),
    ConfigKey("auto.leader.rebalance.enable", ConfigType.BOOLEAN, True,
              "The controller moves leadership back to each partition's preferred replica (the"
              " first of its assignment) when a broker leads too few of its preferred partitions.",
              category="cluster"),
    ConfigKey("leader.imbalance.check.interval.seconds", ConfigType.LONG, 300,
              "How often the controller checks the preferred-leader balance.",
              validator=at_least(1), category="cluster"),
    ConfigKey("leader.imbalance.per.broker.percentage", ConfigType.INT, 10,
              "Share of a broker's preferred partitions led elsewhere above which they are moved back.",
              validator=between(0, 100), category="cluster"),
    ConfigKey("controlled.shutdown.enable", ConfigType.BOOLEAN, True,
              "On a clean stop, ask the controller to move this broker's leaderships first.",
              category="cluster"),
    ConfigKey("controlled.shutdown.max.retries", ConfigType.INT, 3,
              "Attempts at a controlled shutdown before stopping anyway.", validator=at_least(1),
              category="cluster"),
    ConfigKey("controlled.shutdown.retry.backoff.ms", ConfigType.LONG, 5000,
              "Wait between controlled-shutdown attempts.", validator=at_least(0), category="cluster"),
    ConfigKey("inter.broker.address.overrides", ConfigType.LIST, "",
              "seglog's own setting: id=host:port,... reach these brokers at these addresses instead"
              " of the ones they registered (address translation, tunnels, fault-injection proxies).",
              category="cluster"),
    ConfigKey("broker.rack", ConfigType.STRING, "",
              "This broker's rack (KIP-36/392): given to clients in Metadata; with"
              " replica.selector.class=" + RACK_AWARE_SELECTOR + " a consumer that names its"
              " rack (client.rack) is sent to an in-sync replica in that rack. Empty: none.",
              category="cluster"),
    ConfigKey("replica.selector.class", ConfigType.STRING, "",
              "Which replica a partition's leader sends a consumer to (KIP-392). Empty (Kafka's"
              " default): always the leader. " + RACK_AWARE_SELECTOR + ": an in-sync replica in"
              " the consumer's rack (client.rack) when the leader is in another rack; followers"
              " serve consumer fetches (v11+) up to their high watermark either way.",
              validator=_selector_validator(), category="cluster"),
    ConfigKey("event.loop", ConfigType.STRING, "uvloop",
              "The event loop the broker process runs on (seglog's own setting): uvloop (libuv's"
              " loop, compiled: less CPU per request) or asyncio (the standard library's loop).",
              validator=_event_loop_validator(), category="broker"),
    ConfigKey("auto.create.topics.enable", ConfigType.BOOLEAN, True,
              "Create a topic when a client asks Metadata for one that does not exist.",
              category="broker"),
    # Authorization (logcore.security.authorizer; docs/security.md "Authorization")
    ConfigKey("authorizer.class.name", ConfigType.STRING, "",
              "Empty (Kafka's default): no authorization. kafka.security.authorizer.AclAuthorizer:"
              " Kafka's ACLs, kept in ZooKeeper (/kafka-acl) in a cluster, in the log root's"
              " acls.json for a single broker.",
              validator=_authorizer_validator(), category="broker"),
    ConfigKey("super.users", ConfigType.STRING, "",
              "Principals allowed everything, separated by ';' (User:admin;User:broker).",
              category="broker"),
    ConfigKey("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, False,
              "With an authorizer: whether a resource that no ACL names is open to everyone.",
              category="broker"),
    ConfigKey("socket.request.max.bytes", ConfigType.INT, 104857600,
              "Largest request frame accepted; a bigger one closes its connection.",
              validator=at_least(64), category="broker"),
    ConfigKey("queued.max.request.bytes", ConfigType.LONG, 209715200,
              "Request bytes the broker holds at once over all connections (frames being received"
              " and frames not yet handled); at the bound, connections stop being read until"
              " memory is released. -1: no bound (Kafka's default; seglog bounds it by default)."
              " At least socket.request.max.bytes.",
              validator=at_least(-1), category="broker"),
    ConfigKey("socket.request.read.timeout.ms", ConfigType.LONG, 60000,
              "A request frame must arrive whole within this time of its first byte, else its"
              " connection is closed (seglog's own setting: a client trickling bytes cannot hold"
              " a connection and its buffer).", validator=at_least(1), category="broker"),
    ConfigKey("max.connections", ConfigType.INT, 2147483647,
              "Connections the broker accepts at once; one more is closed as it is made.",
              validator=at_least(0), category="broker"),
    ConfigKey("max.connections.per.ip", ConfigType.INT, 2147483647,
              "Connections accepted at once from one IP address; one more is closed as it is made.",
              validator=at_least(0), category="broker"),
    ConfigKey("group.initial.rebalance.delay.ms", ConfigType.INT, 3000,
              "How long the first rebalance of an empty group waits for more members.",
              validator=at_least(0), category="broker"),
    ConfigKey("offsets.topic.num.partitions", ConfigType.INT, 50,
              "Partitions of the internal __consumer_offsets topic.",
              validator=at_least(1), category="broker"),
    ConfigKey("offsets.topic.segment.bytes", ConfigType.INT, 104857600,
              "segment.bytes of __consumer_offsets (kept small so that compaction keeps up).",
              validator=at_least(14), category="broker"),
    ConfigKey("offsets.commit.timeout.ms", ConfigType.INT, 5000,
              "In a cluster, how long an offset commit or group metadata write waits for the"
              " replicas of its __consumer_offsets partition (acks=all) before it is answered"
              " REQUEST_TIMED_OUT.", validator=at_least(1), category="cluster"),
    ConfigKey("transaction.state.log.num.partitions", ConfigType.INT, 50,
              "Partitions of the internal __transaction_state topic (transaction coordinator state).",
              validator=at_least(1), category="broker"),
    ConfigKey("transaction.state.log.replication.factor", ConfigType.INT, 3,
              "Replication factor of __transaction_state in a cluster; its creation fails"
              " (transactional producers wait) until this many brokers are registered. A single"
              " broker uses 1.", validator=at_least(1), category="cluster"),
    ConfigKey("transaction.state.log.min.isr", ConfigType.INT, 2,
              "min.insync.replicas of __transaction_state in a cluster (a single broker uses 1; when"
              " not set, at most transaction.state.log.replication.factor).",
              validator=at_least(1), category="cluster"),
    ConfigKey("transaction.state.log.segment.bytes", ConfigType.INT, 104857600,
              "segment.bytes of __transaction_state (kept small so that compaction keeps up).",
              validator=at_least(14), category="broker"),
    ConfigKey("transaction.max.timeout.ms", ConfigType.INT, 900000,
              "Largest transaction.timeout.ms a producer may ask for (InitProducerId answers"
              " INVALID_TRANSACTION_TIMEOUT above it).", validator=at_least(1), category="broker"),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", ConfigType.INT, 10000,
              "How often the transaction coordinator aborts transactions older than their timeout.",
              validator=at_least(1), category="broker"),
    ConfigKey("transactional.id.expiration.ms", ConfigType.INT, 604800000,
              "A transactional id with no transaction for this long is removed from"
              " __transaction_state.", validator=at_least(1), category="broker"),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", ConfigType.INT, 3600000,
              "How often expired transactional ids are removed.", validator=at_least(1), category="broker"),
    ConfigKey("offsets.retention.minutes", ConfigType.INT, 10080,
              "How long committed offsets are kept (KIP-211): for a group with members, from when"
              " it became empty; for standalone commits, from each commit; then they get tombstones"
              " in __consumer_offsets.", validator=at_least(1), category="broker"),
    ConfigKey("offsets.retention.check.interval.ms", ConfigType.INT, 600000,
              "How often the group coordinator looks for expired committed offsets.",
              validator=at_least(1), category="broker"),
    ConfigKey("group.min.session.timeout.ms", ConfigType.INT, 6000,
              "Smallest session timeout a group member may ask for.", validator=at_least(1),
              category="broker"),
    ConfigKey("group.max.session.timeout.ms", ConfigType.INT, 1800000,
              "Largest session timeout a group member may ask for.", validator=at_least(1),
              category="broker"),
    # The consumer group protocol (KIP-848), beside the classic one.
    ConfigKey("group.coordinator.rebalance.protocols", ConfigType.LIST, "classic,consumer",
              "The group protocols the coordinator serves: classic (JoinGroup/SyncGroup) always,"
              " consumer (ConsumerGroupHeartbeat, KIP-848) unless left out.",
              validator=Validator(lambda v: "classic" in v and set(v) <= {"classic", "consumer"}
                                  and len(set(v)) == len(v),
                                  "classic, optionally with consumer (no repeats)"), category="broker"),
    ConfigKey("group.consumer.heartbeat.interval.ms", ConfigType.INT, 5000,
              "How often consumer-protocol members are told to heartbeat.", validator=at_least(1),
              category="broker"),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", ConfigType.INT, 5000,
              "Lowest group.consumer.heartbeat.interval.ms allowed.", validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", ConfigType.INT, 15000,
              "Highest group.consumer.heartbeat.interval.ms allowed.", validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.session.timeout.ms", ConfigType.INT, 45000,
              "A consumer-protocol member that does not heartbeat this long is removed from its group.",
              validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.min.session.timeout.ms", ConfigType.INT, 45000,
              "Lowest group.consumer.session.timeout.ms allowed.", validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.max.session.timeout.ms", ConfigType.INT, 60000,
              "Highest group.consumer.session.timeout.ms allowed.", validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.max.size", ConfigType.INT, 2147483647,
              "Most members of one consumer-protocol group (one more is refused GROUP_MAX_SIZE_REACHED).",
              validator=at_least(1), category="broker"),
    ConfigKey("group.consumer.assignors", ConfigType.LIST, "uniform,range",
              "The server-side assignors consumer-protocol groups may ask for, the first the default:"
              " uniform, range (or Kafka's class names of them).",
              validator=Validator(_known_assignors, "a list of uniform, range (or Kafka's class names of them)"),
              category="broker"),
    ConfigKey("group.consumer.migration.policy", ConfigType.STRING, "bidirectional",
              "KIP-848's online migration of a live group between the protocols: upgrade (a classic group"
              " becomes a consumer group when a consumer-protocol member joins), downgrade (back when its"
              " last consumer-protocol member leaves), bidirectional (both) or disabled.",
              validator=Validator(lambda v: v.strip().lower() in ("disabled", "upgrade", "downgrade", "bidirectional"),
                                  "one of disabled, upgrade, downgrade, bidirectional"), category="broker"),
    ConfigKey("fetch.max.bytes", ConfigType.INT, 57671680,
              "Cap on a fetch response's size whatever the client asks.", validator=at_least(1024),
              category="broker"),
    ConfigKey("max.incremental.fetch.session.cache.slots", ConfigType.INT, 1000,
              "Incremental fetch sessions (KIP-227) this broker keeps for followers and consumers; 0:"
              " every fetch is answered in full, without a session.", validator=at_least(0),
              category="broker"),
    # client quotas and replication throttles (docs/quotas.md): the windows their rates span
    ConfigKey("quota.window.num", ConfigType.INT, 11,
              "Sample windows a client's quota rate is measured over.", validator=at_least(2),
              category="broker"),
    ConfigKey("quota.window.size.seconds", ConfigType.INT, 1,
              "Length of one client quota sample window.", validator=at_least(1), category="broker"),
    ConfigKey("replication.quota.window.num", ConfigType.INT, 11,
              "Sample windows the replication throttles' rates are measured over.", validator=at_least(2),
              category="cluster"),
    ConfigKey("replication.quota.window.size.seconds", ConfigType.INT, 1,
              "Length of one replication throttle sample window.", validator=at_least(1), category="cluster"),
    ConfigKey("metrics.listener", ConfigType.STRING, "",
              "http://host:port of the Prometheus endpoint (docs/metrics.md; port 0 picks a free"
              " port); empty: no endpoint.", validator=_metrics_listener_validator(), category="broker"),
    ConfigKey("connections.max.idle.ms", ConfigType.LONG, 600000,
              "Close a connection idle this long.", validator=at_least(1000), category="broker"),
    ConfigKey("connection.failed.authentication.delay.ms", ConfigType.INT, 100,
              "How long a failed SASL login's answer and the connection's close are held back"
              " (KIP-306): a client guessing passwords pays this per attempt. Below"
              " connections.max.idle.ms.", validator=at_least(0), category="broker"),
    ConfigKey("max.partitions.per.request", ConfigType.INT, 1000,
              "Most partitions one CreateTopics request may create (all its topics together); a"
              " request asking for more fails each topic beyond it with POLICY_VIOLATION (44).",
              validator=at_least(1), category="broker"),
    ConfigKey("max.partitions", ConfigType.INT, 10000,
              "Most partitions this broker leads (every topic, __consumer_offsets included);"
              " CreateTopics and Metadata auto-create beyond it fail with POLICY_VIOLATION (44)."
              " Partitions already in the root always open, however many.",
              validator=at_least(1), category="broker"),
    ConfigKey("log.max.open.partitions", ConfigType.INT, -1,
              "Most partition logs kept open at once (each holds ~6 file descriptors); the least"
              " recently used idle ones are closed and reopened on demand. -1: derived from the"
              " process's open-file limit (RLIMIT_NOFILE, raised to its hard limit at start).",
              validator=_auto_or_at_least(16), category="broker"),
    ConfigKey("remote.log.manager.task.interval.ms", ConfigType.LONG, 30000,
              "How often the background service tiers the partitions of tiered topics (copy to the"
              " remote tier, local and remote retention); other retention work runs every"
              " log.retention.check.interval.ms.", validator=at_least(1), category="broker"),
)}


@dataclass(frozen=True)
class BrokerConfig:
    values: dict[str, Any]              # broker settings, typed
    log_defaults: dict[str, str]        # the rest: topic defaults with broker-level names
    source: str = "<properties>"
    tiered: TieredConfig | None = None  # the tiered-storage settings among log_defaults
    security: SecurityConfig = field(default=None)   # listeners, TLS, SASL (logcore.security)

    @classmethod
    def from_props(cls, props: dict[str, str], source: str = "<properties>") -> "BrokerConfig":
        values = {k.name: k.default for k in BROKER_KEYS.values()}
        rest: dict[str, str] = {}
        for name, raw in props.items():
            key = BROKER_KEYS.get(name)
            if key is not None:
                try:
                    values[name] = key.parse(raw)
                except InvalidConfigError as exc:
                    raise InvalidConfigError(f"{source}: {exc}") from None
            elif not is_security_name(name):
                rest[name] = raw
        security = SecurityConfig.from_props(props, values["listeners"], values["advertised.listeners"],
                                             cluster=bool(values["zookeeper.connect"]), where=source)
        queued, frame = values["queued.max.request.bytes"], values["socket.request.max.bytes"]
        if 0 <= queued < frame:
            raise InvalidConfigError(
                f"{source}: queued.max.request.bytes={queued} is below socket.request.max.bytes={frame}:"
                f" a frame of the largest size could never be received; give -1 or at least {frame}")
        if not values["zookeeper.connect"]:
            for name in ("default.replication.factor", "offsets.topic.replication.factor"):
                if name in props and values[name] > 1:
                    raise InvalidConfigError(
                        f"{source}: {name}={values[name]} needs zookeeper.connect: a single broker"
                        " holds one replica of each partition; set it to 1 or join a cluster")
            for name in ("transaction.state.log.replication.factor", "transaction.state.log.min.isr"):
                if name in props and values[name] > 1:
                    raise InvalidConfigError(
                        f"{source}: {name}={values[name]} needs zookeeper.connect: a single broker"
                        " holds one replica of each partition; set it to 1 or join a cluster")
            values["offsets.topic.replication.factor"] = 1
            values["transaction.state.log.replication.factor"] = 1
            values["transaction.state.log.min.isr"] = 1
        if values["replica.fetch.wait.max.ms"] >= values["replica.lag.time.max.ms"]:
            raise InvalidConfigError(
                f"{source}: replica.fetch.wait.max.ms={values['replica.fetch.wait.max.ms']} must be below"
                f" replica.lag.time.max.ms={values['replica.lag.time.max.ms']}, or idle followers"
                " would keep leaving the ISR")
        if values["connection.failed.authentication.delay.ms"] >= values["connections.max.idle.ms"]:
            raise InvalidConfigError(
                f"{source}: connection.failed.authentication.delay.ms="
                f"{values['connection.failed.authentication.delay.ms']} must be below connections.max.idle.ms="
                f"{values['connections.max.idle.ms']}: the idle timeout would close the connection first")
        if "transaction.state.log.min.isr" not in props:   # the default 2 asks too much of 1 replica
            values["transaction.state.log.min.isr"] = min(values["transaction.state.log.min.isr"],
                                                          values["transaction.state.log.replication.factor"])
        if values["transaction.state.log.min.isr"] > values["transaction.state.log.replication.factor"]:
            raise InvalidConfigError(
                f"{source}: transaction.state.log.min.isr={values['transaction.state.log.min.isr']} is above"
                f" transaction.state.log.replication.factor={values['transaction.state.log.replication.factor']}:"
                " no write to __transaction_state could ever be acknowledged")
        _check_consumer_group_settings(values, source)
        try:
            resolve_root_defaults(rest)     # validates names and values of the log defaults
        except InvalidConfigError as exc:
            message = str(exc)
            if message.startswith("Unknown root config"):
                # the unknown name itself, not a valid service setting kept beside the defaults
                # (tiered storage, maintenance), which resolve_root_defaults skips
                bad = next((n for n in rest if n not in _known_log_names() and not _service_name(n)),
                           None)
                if bad is not None:
                    message = unknown_message(bad, list(BROKER_KEYS) + list(SECURITY_KEYS) + _known_log_names()
                                               + list(TIERED_KEYS), "broker config")
            raise InvalidConfigError(f"{source}: {message}") from None
        try:
            tiered = TieredConfig.from_props(rest)    # remote.log.*, rsm.config.*: as `seglog maintain`
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"{source}: {exc}") from None
        listener = tiered.metadata_manager_listener_name
        names = [l.name for l in security.listeners]
        if listener and listener not in names:
            raise InvalidConfigError(
                f"{source}: remote.log.metadata.manager.listener.name={listener} is not one of the"
                f" listeners ({', '.join(values['listeners'])})")
        return cls(values, rest, source, tiered, security)

    @classmethod
    def load(cls, path: str) -> "BrokerConfig":
        return cls.from_props(load_properties(path), source=str(path))

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def node_id(self) -> int:
        node = self.values["node.id"]
        if node < 0:
            node = self.values["broker.id"]
        return max(node, 0)

    @property
    def log_dir(self) -> str:
        dirs = self.values["log.dirs"]
        if len(dirs) > 1:
            raise InvalidConfigError(
                f"{self.source}: log.dirs={','.join(dirs)}: this broker serves one log root; give one folder")
        return dirs[0] if dirs else self.values["log.dir"]

    @property
    def cluster(self) -> bool:
        """A cluster member (zookeeper.connect is set)."""
        return bool(self.values["zookeeper.connect"])

    def address_overrides(self) -> dict[int, tuple[str, int]]:
        """inter.broker.address.overrides as {broker id: (host, port)}."""
        out = {}
        for item in self.values["inter.broker.address.overrides"]:
            node, _, address = item.partition("=")
            host, _, port = address.rpartition(":")
            if not (node.strip().isdigit() and host and port.isdigit()):
                raise InvalidConfigError(
                    f"{self.source}: inter.broker.address.overrides: {item!r} is not id=host:port")
            out[int(node)] = (host.strip("[]"), int(port))
        return out

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return self.security.listeners

    @property
    def inter_broker_listener(self) -> str:
        return self.security.inter_broker

    def listener_warning(self) -> str | None:
        """A warning for each listener without authentication (PLAINTEXT, or SSL without
        required client certificates) that binds every network interface (an empty host,
        0.0.0.0 or ::): anyone who can reach its port can read and write every topic."""
        warnings = []
        for listener in self.security.listeners:
            host = listener.bind_host
            settings = self.security.listener(listener.name).settings
            authenticated = listener.sasl or settings.get("ssl.client.auth", "none").lower() == "required"
            if host not in ("0.0.0.0", "::") or authenticated:
                continue
            warnings.append(
                f"listeners={listener.endpoint()} binds every network interface ({host}) and has no"
                f" authentication: any host that can reach port {listener.port} can read, write and delete"
                f" every topic; bind 127.0.0.1 or a private address, or use SASL or ssl.client.auth=required,"
                f" unless the network in front of it is trusted")
        return "; ".join(warnings) or None

    def advertised(self, name: str, bound_host: str, bound_port: int) -> tuple[str, int]:
        """Listener `name`'s address for clients: advertised.listeners' (port 0: the bound one),
        else the listener's own (0.0.0.0 / empty: 127.0.0.1)."""
        adv = next(a for a in self.security.advertised if a.name == name)
        if adv.host and adv.host not in ("0.0.0.0", "::"):
            return adv.host, adv.port or bound_port
        host = bound_host if bound_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return host, adv.port or bound_port


def _check_consumer_group_settings(values: dict, source: str) -> None:
    """Kafka's rules between the group.consumer.* settings."""
    for name in ("heartbeat.interval.ms", "session.timeout.ms"):
        value, lo, hi = (values[f"group.consumer.{name}"], values[f"group.consumer.min.{name}"],
                         values[f"group.consumer.max.{name}"])
        if not lo <= value <= hi:
            raise InvalidConfigError(
                f"{source}: group.consumer.{name}={value} must be between group.consumer.min.{name}={lo}"
                f" and group.consumer.max.{name}={hi}")
    hb, session = values["group.consumer.heartbeat.interval.ms"], values["group.consumer.session.timeout.ms"]
    if hb >= session:
        raise InvalidConfigError(f"{source}: group.consumer.heartbeat.interval.ms={hb} must be below"
                                 f" group.consumer.session.timeout.ms={session}")


def _service_name(name: str) -> bool:
    from logcore.log.config import MAINTENANCE_KEYS, is_tiered_root_name
    return name in MAINTENANCE_KEYS or is_tiered_root_name(name)


def _known_log_names() -> list[str]:
    from logcore.log.config import BROKER_NAMES, CONFIG_KEYS
    return list(CONFIG_KEYS) + list(BROKER_NAMES)
