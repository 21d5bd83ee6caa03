"""What each cluster znode holds: Kafka's JSON, decoded into frozen dataclasses carrying the
znode version a conditional write of them is checked against (where they live:
logcore.cluster.znode_paths)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from logcore.errors import CorruptRecordError

NO_LEADER = -1
LEADER_DURING_DELETE = -2


def now_ms() -> str:
    return str(int(time.time() * 1000))


def dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def loads(raw: bytes, path: str):
    try:
        return json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecordError(f"znode {path} does not hold JSON: {e}", file=path) from None


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...]
    rack: str | None = None
    epoch: int = -1                  # the registration znode's czxid (the broker epoch)
    # listener name -> security protocol (Kafka's listener_security_protocol_map); empty: the
    # endpoints' names, which are protocol names
    protocols: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> bytes:
        known = dict(self.protocols)
        protocols = {}
        for ep in self.endpoints:
            name = ep.split("://", 1)[0]
            protocols[name] = known.get(name) or (name if name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
                                                  else "PLAINTEXT")
        doc = {"version": 4, "host": self.host, "port": self.port, "jmx_port": -1,
               "timestamp": now_ms(), "endpoints": list(self.endpoints),
               "listener_security_protocol_map": protocols}
        if self.rack is not None:
            doc["rack"] = self.rack
        return dumps(doc)

    @classmethod
    def from_json(cls, broker_id: int, raw: bytes, czxid: int, path: str) -> "BrokerRegistration":
        d = loads(raw, path)
        return cls(broker_id, d.get("host") or "", int(d.get("port", -1)),
                   tuple(d.get("endpoints", ())), d.get("rack"), czxid,
                   tuple(sorted((d.get("listener_security_protocol_map") or {}).items())))


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leader and ISR (Kafka's LeaderAndIsr) as the state znode holds them; `zk_version` is the znode's
    version (Kafka's zkVersion / partition epoch), the expected version of the next update."""
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    # The zxid of the write that made this version (the znode's mzxid; -1: not known). A broker
    # whose registration (czxid, its broker epoch) is newer than it restarted since this state
    # was written: its leadership or ISR membership in it belongs to its previous process.
    mzxid: int = field(default=-1, compare=False)

    def same_content(self, other: "LeaderAndIsr") -> bool:
        """The same leader, epochs and ISR (whatever the znode versions)."""
        return (self.leader, self.leader_epoch, tuple(self.isr), self.controller_epoch) == \
            (other.leader, other.leader_epoch, tuple(other.isr), other.controller_epoch)

    def written_before(self, registration_epoch: int) -> bool:
        """Whether this state was written before a registration with that broker epoch."""
        return 0 <= self.mzxid < registration_epoch

    def to_json(self) -> bytes:
        return dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                       "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def from_json(cls, raw: bytes, zk_version: int, path: str, mzxid: int = -1) -> "LeaderAndIsr":
        d = loads(raw, path)
        try:
            return cls(int(d["leader"]), int(d["leader_epoch"]), tuple(int(b) for b in d["isr"]),
                       int(d["controller_epoch"]), zk_version, mzxid)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptRecordError(f"partition state {path} lacks or mangles {e}", file=path) from None


@dataclass(frozen=True)
class TopicAssignment:
    name: str
    topic_id: str
    partitions: dict[int, tuple[int, ...]]        # partition -> replicas in preference order
    zk_version: int = -1
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        def enc(m):
            return {str(p): list(r) for p, r in sorted(m.items()) if r}
        return dumps({"version": 3, "topic_id": self.topic_id, "partitions": enc(self.partitions),
                       "adding_replicas": enc(self.adding_replicas),
                       "removing_replicas": enc(self.removing_replicas)})

    def reassigning(self, partition: int) -> bool:
        """Whether `partition` has a reassignment in progress (adding or removing replicas)."""
        return bool(self.adding_replicas.get(partition) or self.removing_replicas.get(partition))

    def target_replicas(self, partition: int) -> tuple[int, ...]:
        """Where `partition` is going: its replicas without the ones being removed (TRS)."""
        removing = set(self.removing_replicas.get(partition, ()))
        return tuple(r for r in self.partitions.get(partition, ()) if r not in removing)

    def origin_replicas(self, partition: int) -> tuple[int, ...]:
        """Where `partition` came from: its replicas without the ones being added (ORS)."""
        adding = set(self.adding_replicas.get(partition, ()))
        return tuple(r for r in self.partitions.get(partition, ()) if r not in adding)

    @classmethod
    def from_json(cls, name: str, raw: bytes, zk_version: int, path: str) -> "TopicAssignment":
        d = loads(raw, path)

        def dec(m):
            return {int(p): tuple(int(b) for b in r) for p, r in (m or {}).items()}
        return cls(name, d.get("topic_id", ""), dec(d.get("partitions")), zk_version,
                   dec(d.get("adding_replicas")), dec(d.get("removing_replicas")))


@dataclass(frozen=True)
class ControllerEpoch:
    """What a controller fences its writes with: the epoch it holds and the version of
    /controller_epoch it set."""
    epoch: int
    zk_version: int


def partitions_json(partitions) -> bytes:
    """An election request's or ISR change notification's {"partitions": [...]}."""
    return dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def partitions_from_json(raw: bytes, path: str) -> list[tuple[str, int]]:
    return [(d["topic"], int(d["partition"])) for d in loads(raw, path).get("partitions", [])]


def topic_config_json(config) -> bytes:
    return dumps({"version": 1, "config": {k: str(v) for k, v in dict(config or {}).items()}})


def topic_config_from_json(raw: bytes, path: str) -> dict[str, str]:
    return {k: str(v) for k, v in loads(raw, path).get("config", {}).items()}


def controller_json(broker_id: int) -> bytes:
    return dumps({"version": 1, "brokerid": int(broker_id), "timestamp": now_ms()})


def controller_from_json(raw: bytes, path: str) -> int:
    """The broker id holding /controller (-1 when the JSON names none)."""
    return int(loads(raw, path).get("brokerid", -1))
