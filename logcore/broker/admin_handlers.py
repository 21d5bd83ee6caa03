"""Topic administration handlers of the Broker: CreateTopics, DeleteTopics, CreatePartitions,
and the topic creation that Metadata's auto-creation shares with CreateTopics.

Held by the `Broker` (logcore/broker/broker.py), which dispatches to these methods by API key.
"""
from __future__ import annotations

import asyncio
import logging
import threading

from logcore.wire import error_codes as E
from logcore.coordinator import offsets_topic as OT
from logcore.errors import SegLogError, TopicExistsError
from logcore.log.config import CONFIG_KEYS, ConfigType, resolve_root_defaults
from logcore.wire.config_resources import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC
from logcore.wire.protocol import ZERO_UUID, Request


# The broker's log: these lines keep the logger name they had when the handlers were in broker.py.
logger = logging.getLogger("logcore.broker.broker")

_KAFKA_CONFIG_TYPE = {ConfigType.BOOLEAN: 1, ConfigType.STRING: 2, ConfigType.INT: 3,
                      ConfigType.LONG: 5, ConfigType.DOUBLE: 6, ConfigType.LIST: 7}


class AdminHandlers:
    """Over the broker's `config`, log `root` and open `partitions`; `membership` says where
    topic admin goes (the broker alone, or the cluster's catalog)."""

    def __init__(self, config, root, partitions, membership):
        self.config = config
        self.root = root
        self.partitions = partitions
        self.membership = membership
        self.node_id = config.node_id
        self.create_lock = threading.Lock()    # topic creation vs. the partition caps

    def auto_create(self, name: str) -> int:
        """Create `name` as Metadata's auto-creation asks (a thread): the error code."""
        try:
            with self.create_lock:
                self._check_partition_cap(name, self.config["num.partitions"])
                self.create_topic(name, self.config["num.partitions"], {})
            logger.info("auto-created topic %s", name)
            return E.NONE
        except TopicExistsError:
            # created in the root by another process since the refresh: serve it
            self.partitions.refresh_topics()
            return E.NONE if name in self.partitions.topics else E.UNKNOWN_TOPIC_OR_PARTITION
        except _Failed as exc:
            logger.info("auto-create of topic %s refused: %s", name, exc)
            return exc.code
        except SegLogError as exc:
            return E.error_code(exc)

    def _check_partition_cap(self, name: str, partitions: int, in_request: int = 0) -> None:
        """POLICY_VIOLATION when `partitions` more (after `in_request` already created by this
        request) pass max.partitions.per.request or this broker's max.partitions. The caller
        holds create_lock, so that concurrent creations cannot pass the cap together."""
        per_request = self.config["max.partitions.per.request"]
        if in_request + partitions > per_request:
            raise _Failed(E.POLICY_VIOLATION,
                          f"topic {name!r}: {partitions} partitions (after {in_request} earlier in"
                          f" this request) exceed max.partitions.per.request={per_request}")
        cap = self.config["max.partitions"]
        have = sum(info.partitions for info in self.partitions.topics.values())
        if have + partitions > cap:
            raise _Failed(E.POLICY_VIOLATION,
                          f"topic {name!r}: {partitions} more partitions would make {have + partitions}"
                          f" on this broker, above max.partitions={cap}")

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]):
        """Create the topic in the root and open its partitions (blocking)."""
        with self.partitions.lock:
            info = self.root.create_topic(name, partitions, configs)
            self.partitions.open_topic(info)
        return info

    # ------------------------------------------------------------------ CreateTopics / DeleteTopics
    async def create_topics(self, req: Request) -> dict:
        return await self.membership.topic_catalog.create_topics(req)

    async def local_create_topics(self, req: Request) -> dict:
        return {"throttle_time": 0, "topics": await asyncio.to_thread(self._create_topics, req.body)}

    def _create_topics(self, body) -> list[dict]:
        results = []
        seen = set()
        in_request = 0          # partitions this request asked for so far (max.partitions.per.request)
        for t in body.topics:
            res = {"name": t.name, "error_code": E.NONE, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(res)
            partitions = t.num_partitions if t.num_partitions != -1 else self.config["num.partitions"]
            try:
                if t.name in seen:
                    raise _Failed(E.INVALID_REQUEST, f"topic {t.name!r} is listed twice")
                seen.add(t.name)
                if t.assignments:
                    bad = [a for a in t.assignments if list(a.broker_ids) != [self.node_id]]
                    if bad or t.num_partitions != -1 or t.replication_factor != -1:
                        raise _Failed(E.INVALID_REPLICA_ASSIGNMENT,
                                      f"this single broker (node {self.node_id}) holds every replica;"
                                      " an assignment may only name it, once per partition")
                    partitions = len(t.assignments)
                elif t.replication_factor not in (-1, 1):
                    raise _Failed(E.INVALID_REPLICATION_FACTOR,
                                  f"replication factor {t.replication_factor} is larger than the 1"
                                  " available broker")
                if partitions < 1:
                    raise _Failed(E.INVALID_PARTITIONS, f"number of partitions {partitions} must be at least 1")
                configs = {c.name: c.value for c in t.configs if c.value is not None}
                if t.name in self.partitions.topics:
                    raise _Failed(E.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists")
                with self.create_lock:
                    self._check_partition_cap(t.name, partitions, in_request)
                    in_request += partitions
                if body.validate_only:
                    from logcore.log.config import LogConfig, check_topic_against_root, validate_topic_overrides
                    from logcore.log.topic_name import validate_topic_name
                    validate_topic_name(t.name)
                    validate_topic_overrides(configs)
                    defaults = self.root.defaults()
                    check_topic_against_root(t.name, LogConfig.from_props(configs, defaults), defaults)
                else:
                    with self.create_lock:
                        self._check_partition_cap(t.name, partitions)
                        self.create_topic(t.name, partitions, configs)
                res.update(num_partitions=partitions, replication_factor=1,
                           configs=self._describe_topic_configs(t.name, None) if not body.validate_only else [])
            except _Failed as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
        return results

    async def create_partitions(self, req: Request) -> dict:
        """CreatePartitions: grow topics (never shrink: INVALID_PARTITIONS)."""
        return await self.membership.topic_catalog.create_partitions(req)

    async def local_create_partitions(self, req: Request) -> dict:
        return {"throttle_time": 0, "results": await asyncio.to_thread(self._create_partitions, req.body)}

    def _create_partitions(self, body) -> list[dict]:
        results = []
        for t in body.topics:
            res = {"name": t.name, "error_code": E.NONE, "error_message": None}
            results.append(res)
            try:
                info = self.partitions.topics.get(t.name)
                if t.name == OT.TOPIC:
                    raise _Failed(E.INVALID_REQUEST, f"{OT.TOPIC} is internal: its partition count maps"
                                  " groups to coordinators and cannot change")
                if info is None:
                    raise _Failed(E.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{t.name}' does not exist.")
                if t.count <= info.partitions:
                    raise _Failed(E.INVALID_PARTITIONS,
                                  f"Topic currently has {info.partitions} partitions, which is higher than"
                                  f" the requested {t.count}.")
                if t.assignments and any(list(a.broker_ids) != [self.node_id] for a in t.assignments):
                    raise _Failed(E.INVALID_REPLICA_ASSIGNMENT,
                                  f"this single broker (node {self.node_id}) holds every replica")
                with self.create_lock:
                    self._check_partition_cap(t.name, t.count - info.partitions)
                    if not body.validate_only:
                        with self.partitions.lock:
                            grown = self.root.add_partitions(t.name, t.count)
                            self.partitions.open_topic(grown, eager=False)
            except _Failed as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
        return results

    async def delete_topics(self, req: Request) -> dict:
        body = req.body
        if req.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        else:
            wanted = [(n, None) for n in body.topic_names]
        return await self.membership.topic_catalog.delete_topics(req, wanted)

    async def local_delete_topics(self, req: Request, wanted) -> dict:
        return {"throttle_time": 0, "responses": await asyncio.to_thread(self._delete_topics, wanted)}

    def _delete_topics(self, wanted) -> list[dict]:
        out = []
        for name, topic_id in wanted:
            if name is None and topic_id not in (None, ZERO_UUID):
                name = self.partitions.topic_ids.get(topic_id.bytes)
                if name is None:
                    out.append({"name": None, "topic_id": topic_id, "error_code": E.UNKNOWN_TOPIC_ID})
                    continue
            tid = self.partitions.topic_uuid(name) if name else ZERO_UUID
            try:
                if name not in self.partitions.topics:
                    raise _Failed(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
                if name == OT.TOPIC:
                    raise _Failed(E.INVALID_TOPIC_EXCEPTION, f"{OT.TOPIC} is internal; it cannot be deleted")
                with self.partitions.lock:
                    self.partitions.close_topic(name)
                    self.root.delete_topic(name)
                out.append({"name": name, "topic_id": tid, "error_code": E.NONE})
            except _Failed as exc:
                out.append({"name": name, "topic_id": tid, "error_code": exc.code, "error_message": str(exc)})
            except SegLogError as exc:
                out.append({"name": name, "topic_id": tid, "error_code": E.error_code(exc),
                            "error_message": str(exc)})
        return out

    # ------------------------------------------------------------------ CreateTopics' answer
    def _describe_topic_configs(self, topic: str, keys: set[str] | None, config=None) -> list[dict]:
        """The created topic's configs, as CreateTopics v5 answers them (no synonyms)."""
        config = config if config is not None else self.root.topic_config(topic)
        from_root = set(resolve_root_defaults(self.root.defaults()))
        out = []
        for name, value in config.to_properties().items():
            if keys is not None and name not in keys:
                continue
            key = CONFIG_KEYS[name]
            source = (SOURCE_TOPIC if name in config.overrides else
                      SOURCE_STATIC_BROKER if name in from_root else SOURCE_DEFAULT)
            out.append({"name": name, "value": value, "read_only": False, "config_source": source,
                        "is_default": source == SOURCE_DEFAULT, "is_sensitive": False, "synonyms": [],
                        "config_type": _KAFKA_CONFIG_TYPE.get(key.type, 0), "documentation": key.doc})
        return out


class _Failed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
