# Over 600 lines: one handler per Kafka API the broker serves, over shared partition and group state.
"""The broker: request handlers over the log root it serves.

Each handler takes a parsed `Request` and returns the response as a dict of Kafka field names
(see protocol.build), an encoded frame (bytes, EncodedResponse: Produce and Fetch are encoded by
hand), `None` for no response (Produce with acks=0), or an awaitable of either:
the server awaits a handler's immediate part before it reads the connection's next request, and
queues the awaitable part so that a slow request (a produce waiting for its commit, a long-polling
fetch) does not hold up the requests behind it. Responses still go out in request order.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from typing import Any, Awaitable

from logcore.broker import errors as E
from logcore.broker.api_versions import SERVED, advertised
from logcore.broker import offsets_topic as OT
from logcore.broker.config import BROKER_KEYS, BrokerConfig
from logcore.broker.error_response import error_response
from logcore.broker.resources import open_partition_budget
from logcore.storage.secrets import redact_url
from logcore.broker.fetch_response import EncodedResponse, encode_fetch_response
from logcore.broker.groups import OFFSET_METADATA_MAX_BYTES, GroupCoordinator
from logcore.broker.maintenance import BrokerMaintenance
from logcore.broker.partitions import PartitionManager
from logcore.broker.produce_codec import encode_produce_results
from logcore.broker.producer_ids import MAX_EPOCH, ProducerIdAllocator
from logcore.broker.protocol import ZERO_UUID, Request
from logcore.errors import CorruptRecordError, SegLogError, TopicExistsError
from logcore.log.file_slice import FileSlice
from logcore.log.config import CONFIG_KEYS, ConfigType, MaintenanceConfig, resolve_root_defaults
from logcore.log.log_root import LogRoot
from logcore.log.partition_metadata import parse_topic_id
from logcore.tiered.config import RSM_PREFIX, TIERED_KEYS, TieredConfig

logger = logging.getLogger(__name__)

_DAMAGE_LOGGED: dict[tuple, float] = {}     # (file, position) -> when it was last logged
_DAMAGE_LOG_INTERVAL_S = 60.0


def _log_damage(topic: str, partition: int, offset: int, exc: CorruptRecordError) -> None:
    """A fetch met damaged bytes (it answers CORRUPT_MESSAGE for them): log the segment file and
    position, once a minute per place (a consumer retries the same offset)."""
    key = (exc.file, exc.position)
    now = time.monotonic()
    if now - _DAMAGE_LOGGED.get(key, -_DAMAGE_LOG_INTERVAL_S) < _DAMAGE_LOG_INTERVAL_S:
        return
    if len(_DAMAGE_LOGGED) > 4096:
        _DAMAGE_LOGGED.clear()
    _DAMAGE_LOGGED[key] = now
    logger.error("fetch of %s-%d at offset %d: damaged data, answered CORRUPT_MESSAGE: %s",
                 topic, partition, offset, exc)

INT32_MIN = -(2 ** 31)
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
_KAFKA_CONFIG_TYPE = {ConfigType.BOOLEAN: 1, ConfigType.STRING: 2, ConfigType.INT: 3,
                      ConfigType.LONG: 5, ConfigType.DOUBLE: 6, ConfigType.LIST: 7}
# DescribeConfigs config_source values
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5

# Fetch records below this size are copied into the response: sendfile's fixed cost (an
# event-loop round trip per range) is larger than copying them.
SENDFILE_MIN_BYTES = 64 * 1024

Result = dict | bytes | EncodedResponse | None | Awaitable[dict | bytes | EncodedResponse | None]


class Broker:
    def __init__(self, config: BrokerConfig, root: LogRoot, advertised: tuple[str, int]):
        self.config = config
        self.root = root
        self.node_id = config.node_id
        self.host, self.port = advertised
        self.partitions = PartitionManager(
            root, open_partition_budget(config["log.max.open.partitions"]))
        self.producer_ids = ProducerIdAllocator(root.storage)
        self.cluster_id = _cluster_id(root)
        self.background: set[asyncio.Task] = set()
        self.groups = GroupCoordinator(
            self.partitions, self._ensure_offsets_topic,
            num_partitions=config["offsets.topic.num.partitions"],
            initial_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_ms=config["group.min.session.timeout.ms"],
            max_session_ms=config["group.max.session.timeout.ms"])
        self.maintenance = BrokerMaintenance(
            self.partitions, MaintenanceConfig.from_props(config.log_defaults),
            tiering_interval_ms=config["remote.log.manager.task.interval.ms"], broker_id=self.node_id)
        self.handlers = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.join_group, 12: self.heartbeat, 13: self.leave_group, 14: self.sync_group,
            16: self.list_groups,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
            22: self.init_producer_id, 23: self.offset_for_leader_epoch, 32: self.describe_configs,
            15: self.describe_groups,
        }
        self.served = dict(SERVED)
        self._create_lock = threading.Lock()    # topic creation vs. the partition caps

    def open(self) -> None:
        """Open every partition (blocking) and rebuild the groups from __consumer_offsets.
        With tiered storage, a remote root that cannot be written fails the start."""
        tier = self.root.remote_tier()
        if tier is not None:
            tier.check_access()
        self.partitions.open_all()
        self.groups.load()

    async def start(self) -> None:
        await self.groups.start()
        self.maintenance.start()

    async def stop(self) -> None:
        await self.groups.stop()
        await asyncio.to_thread(self.maintenance.stop)

    def close(self) -> None:
        self.partitions.close()

    def _ensure_offsets_topic(self) -> None:
        """Create the compacted __consumer_offsets topic at first use (blocking)."""
        if OT.TOPIC in self.partitions.topics:
            return
        try:
            self._create_topic(OT.TOPIC, self.config["offsets.topic.num.partitions"],
                               {**OT.TOPIC_CONFIG, "segment.bytes": str(self.config["offsets.topic.segment.bytes"])})
            logger.info("created %s (%d partitions, compacted)", OT.TOPIC,
                        self.config["offsets.topic.num.partitions"])
        except TopicExistsError:
            self.partitions.open_topic(self.root.describe_topic(OT.TOPIC))

    async def handle(self, request: Request) -> Result:
        """The handler's answer; a handler that fails unexpectedly is answered with an error
        code for what the request named (one log line), never by dropping the connection."""
        try:
            result = await self.handlers[request.api_key](request)
        except Exception as exc:   # noqa: BLE001 - a bug or an unexpected state costs this request only
            return self._failed(request, exc)
        if result is not None and not isinstance(result, (dict, bytes, EncodedResponse)) \
                and inspect.isawaitable(result):
            return self._guarded(request, result)
        return result

    async def _guarded(self, request: Request, pending) -> Result:
        try:
            return await pending
        except Exception as exc:   # noqa: BLE001 - as in handle()
            return self._failed(request, exc)

    def _failed(self, request: Request, exc: Exception) -> Result:
        code = E.error_code(exc)       # UNKNOWN_SERVER_ERROR for anything it does not map
        if code == E.NONE:
            code = E.UNKNOWN_SERVER_ERROR
        message = f"{type(exc).__name__}: {exc}"
        if request.api_key == 0 and getattr(request.body, "acks", 1) == 0:
            logger.error("produce (acks=0, correlation id %d) failed: %s", request.correlation_id, message)
            return None
        answer = error_response(request, code, message,
                                [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}])
        logger.error("request api key %d v%d (correlation id %d, client %s) failed: %s; answered"
                     " error code %d%s", request.api_key, request.api_version, request.correlation_id,
                     request.client_id, message, code, "" if answer is not None else " by closing the connection")
        logger.debug("request failure", exc_info=exc)
        if answer is None:
            raise exc
        return answer

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # ------------------------------------------------------------------ ApiVersions
    def api_versions_body(self, error: int = E.NONE) -> dict:
        return {"error_code": error, "throttle_time": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, lo, hi in advertised(self.served)]}

    async def api_versions(self, req: Request) -> dict:
        return self.api_versions_body()

    # ------------------------------------------------------------------ Metadata
    def _topic_uuid(self, name: str) -> uuid.UUID:
        info = self.partitions.topics.get(name)
        return parse_topic_id(info.topic_id) if info and info.topic_id else ZERO_UUID

    async def metadata(self, req: Request) -> dict:
        body = req.body
        if body.topics is None:
            names = sorted(self.partitions.topics)
        else:
            names = []
            for t in body.topics:
                name = t.name
                if name is None and getattr(t, "topic_id", None) not in (None, ZERO_UUID):
                    name = self.partitions.topic_ids.get(t.topic_id.bytes)
                names.append(name)
        allow_create = getattr(body, "allow_auto_topic_creation", True) and \
            self.config["auto.create.topics.enable"]
        # Topics another process created, grew or removed in the root since the last request.
        await asyncio.to_thread(self.partitions.refresh_topics)
        topics = []
        for name in names:
            if name is None:
                topics.append({"error_code": E.UNKNOWN_TOPIC_ID, "name": None, "partitions": [],
                               "topic_authorized_operations": INT32_MIN})
                continue
            error = E.NONE
            if name not in self.partitions.topics:
                error = E.UNKNOWN_TOPIC_OR_PARTITION
                if allow_create and body.topics is not None:
                    error = await asyncio.to_thread(self._auto_create, name)
            if error != E.NONE:
                topics.append({"error_code": error, "name": name, "partitions": [],
                               "topic_authorized_operations": INT32_MIN})
                continue
            info = self.partitions.topics.get(name)
            if info is None:      # gone meanwhile (deleted by another request)
                topics.append({"error_code": E.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": [],
                               "topic_authorized_operations": INT32_MIN})
                continue
            parts = []
            for p in range(info.partitions):
                part = self.partitions.get(name, p)
                parts.append({"error_code": E.NONE, "partition_index": p, "leader_id": self.node_id,
                              "leader_epoch": part.leader_epoch if part else -1,
                              "replica_nodes": [self.node_id], "isr_nodes": [self.node_id],
                              "offline_replicas": []})
            topics.append({"error_code": E.NONE, "name": name, "topic_id": self._topic_uuid(name),
                           "is_internal": name.startswith("__"), "partitions": parts,
                           "topic_authorized_operations": INT32_MIN})
        return {"throttle_time": 0,
                "brokers": [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}],
                "cluster_id": self.cluster_id, "controller_id": self.node_id, "topics": topics,
                "cluster_authorized_operations": INT32_MIN}

    def _auto_create(self, name: str) -> int:
        try:
            with self._create_lock:
                self._check_partition_cap(name, self.config["num.partitions"])
                self._create_topic(name, self.config["num.partitions"], {})
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
        holds _create_lock, so that concurrent creations cannot pass the cap together."""
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

    def _create_topic(self, name: str, partitions: int, configs: dict[str, str]):
        with self.partitions.lock:
            info = self.root.create_topic(name, partitions, configs)
            self.partitions.open_topic(info)
        return info

    # ------------------------------------------------------------------ CreateTopics / DeleteTopics
    async def create_topics(self, req: Request) -> dict:
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
                with self._create_lock:
                    self._check_partition_cap(t.name, partitions, in_request)
                    in_request += partitions
                if body.validate_only:
                    from logcore.log.config import (LogConfig, check_topic_against_root,
                                                    validate_topic_name, validate_topic_overrides)
                    validate_topic_name(t.name)
                    validate_topic_overrides(configs)
                    defaults = self.root.defaults()
                    check_topic_against_root(t.name, LogConfig.from_props(configs, defaults), defaults)
                else:
                    with self._create_lock:
                        self._check_partition_cap(t.name, partitions)
                        self._create_topic(t.name, partitions, configs)
                res.update(num_partitions=partitions, replication_factor=1,
                           configs=self._describe_topic_configs(t.name, None) if not body.validate_only else [])
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
        return {"throttle_time": 0, "responses": await asyncio.to_thread(self._delete_topics, wanted)}

    def _delete_topics(self, wanted) -> list[dict]:
        out = []
        for name, topic_id in wanted:
            if name is None and topic_id not in (None, ZERO_UUID):
                name = self.partitions.topic_ids.get(topic_id.bytes)
                if name is None:
                    out.append({"name": None, "topic_id": topic_id, "error_code": E.UNKNOWN_TOPIC_ID})
                    continue
            tid = self._topic_uuid(name) if name else ZERO_UUID
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

    # ------------------------------------------------------------------ DescribeConfigs
    async def describe_configs(self, req: Request) -> dict:
        results = []
        for r in req.body.resources:
            keys = None if r.configuration_keys is None else set(r.configuration_keys)
            res = {"error_code": E.NONE, "error_message": None, "resource_type": r.resource_type,
                   "resource_name": r.resource_name, "configs": []}
            try:
                if r.resource_type == 2:
                    if r.resource_name not in self.partitions.topics:
                        raise _Failed(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {r.resource_name!r} does not exist")
                    res["configs"] = self._describe_topic_configs(r.resource_name, keys)
                elif r.resource_type == 4:
                    if r.resource_name not in ("", str(self.node_id)):
                        raise _Failed(E.INVALID_REQUEST, f"this is broker {self.node_id}, not {r.resource_name}")
                    res["configs"] = self._describe_broker_configs(keys)
                else:
                    raise _Failed(E.INVALID_REQUEST, f"resource type {r.resource_type} is not served")
            except _Failed as exc:
                res.update(error_code=exc.code, error_message=str(exc))
            except SegLogError as exc:
                res.update(error_code=E.error_code(exc), error_message=str(exc))
            results.append(res)
        return {"throttle_time": 0, "results": results}

    def _describe_topic_configs(self, topic: str, keys: set[str] | None) -> list[dict]:
        config = self.root.topic_config(topic)
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

    def _describe_broker_configs(self, keys: set[str] | None) -> list[dict]:
        out = []
        for name, key in BROKER_KEYS.items():
            if keys is not None and name not in keys:
                continue
            value = key.format(self.config.values[name])
            out.append({"name": name, "value": value, "read_only": True,
                        "config_source": SOURCE_STATIC_BROKER, "is_sensitive": False, "synonyms": [],
                        "config_type": _KAFKA_CONFIG_TYPE.get(key.type, 0), "documentation": key.doc})
        return out + self._describe_tiered_configs(keys)

    def _describe_tiered_configs(self, keys: set[str] | None) -> list[dict]:
        """The root's tiered-storage settings in effect (broker.properties over the root's
        stored defaults); the rsm.config.storage.* options other than the URL (credentials,
        endpoints) are not reported."""
        defaults = self.root.defaults()
        tiered = TieredConfig.from_props(defaults)
        out = []
        for short, key in TIERED_KEYS.items():
            name = short if key.category == "tiered" else RSM_PREFIX + short
            if keys is not None and name not in keys:
                continue
            source = SOURCE_STATIC_BROKER if name in defaults else SOURCE_DEFAULT
            out.append({"name": name, "value": redact_url(key.format(tiered.get(short))), "read_only": True,
                        "config_source": source, "is_sensitive": False, "synonyms": [],
                        "config_type": _KAFKA_CONFIG_TYPE.get(key.type, 0), "documentation": key.doc})
        return out

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, req: Request) -> dict:
        body = req.body
        if body.transactional_id is not None:    # no transactions: see find_coordinator
            return {"throttle_time": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        pid = getattr(body, "producer_id", -1)
        epoch = getattr(body, "producer_epoch", -1)
        if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
            # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
            return {"throttle_time": 0, "error_code": E.NONE, "producer_id": pid,
                    "producer_epoch": epoch + 1}
        pid = await asyncio.to_thread(self.producer_ids.allocate)
        return {"throttle_time": 0, "error_code": E.NONE, "producer_id": pid, "producer_epoch": 0}

    # ------------------------------------------------------------------ Produce
    async def produce(self, req: Request) -> Result:
        return self.produce_now(req)

    def produce_now(self, req: Request) -> Result:
        """Produce without a coroutine of its own: the response (bytes, or a dict for a request
        refused as a whole), None for acks=0, or an awaitable when a batch waits for a commit.
        Never raises: a failure is answered with error codes (see handle)."""
        try:
            result = self._produce_now(req)
        except Exception as exc:   # noqa: BLE001
            return self._failed(req, exc)
        if result is not None and not isinstance(result, (dict, bytes)) and inspect.isawaitable(result):
            return self._guarded(req, result)
        return result

    def _produce_now(self, req: Request) -> Result:
        body = req.body
        acks = body.acks
        error = E.NONE
        message = None
        if acks not in (0, 1, -1):
            error, message = E.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of 0, 1, -1"
        elif body.transactional_id is not None:
            error, message = E.INVALID_TXN_STATE, "transactions are not supported by this broker"
        if error != E.NONE:
            if acks == 0:
                return None
            return {"responses": [{"name": t.name, "partition_responses": [
                _produce_result(p.index, error, message=message) for p in t.partition_data]}
                for t in body.topic_data], "throttle_time": 0}
        entries = self._submit_all(body)
        if acks == 0:
            for entry in entries:
                if entry[3] is not None:
                    entry[3].add_done_callback(_consume_exception)   # nobody to tell; logged by the worker
            return None
        if all(entry[3] is None or entry[3].done() for entry in entries):
            return self._produce_response(entries, req)       # committed on the loop already
        return self._finish_produce(entries, req)

    def _submit_all(self, body) -> list[tuple]:
        """Queue every partition's batch now (keeping this connection's order); errors found
        before appending are answered directly. One (topic, index, partition, future, error
        code, message) per partition of the request."""
        out = []
        loop = asyncio.get_running_loop()
        acks_all = body.acks == -1
        for t in body.topic_data:
            name = t.name
            for pd in t.partition_data:
                part = self.partitions.get(name, pd.index)
                records = pd.records
                if name == OT.TOPIC:
                    out.append((name, pd.index, None, None, E.INVALID_TOPIC_EXCEPTION,
                                f"{OT.TOPIC} is internal: only the group coordinator writes it"))
                elif part is None:
                    self.partitions.refresh_soon()     # created in the root by another process?
                    out.append((name, pd.index, None, None, E.UNKNOWN_TOPIC_OR_PARTITION,
                                f"{name}-{pd.index} is not a partition of this broker"))
                elif not records:
                    out.append((name, pd.index, None, None, E.INVALID_RECORD, "no records"))
                elif len(records) >= 61 and records[22] & 0x10:
                    out.append((name, pd.index, None, None, E.INVALID_TXN_STATE,
                                "transactional batches are not supported"))
                elif acks_all and part.log.config.min_insync_replicas > 1:
                    # One replica per partition: Kafka's answer when the ISR is below min.isr.
                    out.append((name, pd.index, None, None, E.NOT_ENOUGH_REPLICAS,
                                f"The size of the current ISR 1 is insufficient to satisfy the min.isr "
                                f"requirement of {part.log.config.min_insync_replicas} for partition "
                                f"{name}-{pd.index} (this broker keeps one replica per partition)"))
                else:
                    out.append((name, pd.index, part, self.partitions.submit(part, records, loop), E.NONE, None))
        return out

    async def _finish_produce(self, entries, req: Request) -> bytes:
        for entry in entries:
            if entry[3] is not None:
                await asyncio.wait([entry[3]])
        return self._produce_response(entries, req)

    def _produce_response(self, entries, req: Request) -> bytes:
        """The encoded response, once every submitted batch's future is done."""
        by_topic: dict[str, list] = {}
        for topic, index, part, fut, code, message in entries:
            if fut is None:
                result = (index, code, -1, -1, -1, message)
            else:
                exc = fut.exception()
                if exc is None:
                    info = fut.result()
                    result = (index, E.NONE, info.first_offset, info.log_append_time,
                              part.log.log_start_offset, None)
                elif isinstance(exc, SegLogError):
                    code = E.error_code(exc)
                    logger.info("produce to %s-%d rejected (%s): %s", part.topic, part.index, code, exc)
                    result = (index, code, -1, -1, -1, *E.produce_error_detail(exc))
                else:   # an OS error or a bug: this partition only
                    logger.error("produce to %s-%d failed: %r", part.topic, part.index, exc)
                    result = (index, E.error_code(exc), -1, -1, -1, str(exc))
            results = by_topic.get(topic)
            if results is None:
                by_topic[topic] = [result]
            else:
                results.append(result)
        return encode_produce_results(req.correlation_id, req.api_version, list(by_topic.items()))

    # ------------------------------------------------------------------ ListOffsets
    async def list_offsets(self, req: Request) -> dict:
        return {"throttle_time": 0, "topics": await asyncio.to_thread(self._list_offsets, req.body)}

    def _list_offsets(self, body) -> list[dict]:
        committed = getattr(body, "isolation_level", 0) == 1
        if any(self.partitions.get(t.name, p.partition_index) is None
               for t in body.topics for p in t.partitions):
            self.partitions.refresh_topics()      # created in the root by another process?
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                res = {"partition_index": p.partition_index, "error_code": E.NONE,
                       "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
                part = self.partitions.get(t.name, p.partition_index)
                if part is None:
                    res["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    log = part.log
                    try:
                        if p.timestamp == EARLIEST:
                            res["offset"] = log.log_start_offset
                        elif p.timestamp == LATEST:
                            res["offset"] = log.last_stable_offset if committed else log.high_watermark
                        elif p.timestamp == MAX_TIMESTAMP:
                            found = _max_timestamp_offset(log)
                            if found is not None:
                                res["offset"], res["timestamp"] = found
                        elif p.timestamp >= 0:
                            found = log.offset_for_timestamp(p.timestamp)
                            if found is not None:
                                res["offset"], res["timestamp"] = found
                        else:
                            res["error_code"] = E.INVALID_REQUEST
                        if res["offset"] >= 0:
                            res["leader_epoch"] = log.leader_epoch
                    except SegLogError as exc:
                        res["error_code"] = E.error_code(exc)
                parts.append(res)
            topics.append({"name": t.name, "partitions": parts})
        return topics

    # ------------------------------------------------------------------ Fetch
    async def fetch(self, req: Request) -> Result:
        body = req.body
        v = req.api_version
        if getattr(body, "session_id", 0) != 0 or getattr(body, "session_epoch", -1) > 0:
            # This broker never creates fetch sessions (it answers session_id 0).
            return {"throttle_time": 0, "error_code": E.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                    "responses": []}
        return self._fetch(body, v, req.correlation_id)

    async def _fetch(self, body, v: int, correlation_id: int) -> EncodedResponse:
        loop = asyncio.get_running_loop()
        isolation = "read_committed" if getattr(body, "isolation_level", 0) == 1 else "read_uncommitted"
        max_bytes = max(0, min(body.max_bytes, self.config["fetch.max.bytes"]))
        deadline = loop.time() + max(0.0, body.max_wait.total_seconds())
        if self._fetch_names_unknown(body, v):
            await asyncio.to_thread(self.partitions.refresh_topics)   # created by another process?
        wanted = []          # (name, topic_id, partition request, Partition | None, error)
        for t in body.topics:
            if v >= 13:
                name = self.partitions.topic_ids.get(t.topic_id.bytes)
                tid = t.topic_id
            else:
                name, tid = t.topic, self._topic_uuid(t.topic)
            for p in t.partitions:
                part = self.partitions.get(name, p.partition) if name else None
                error = E.NONE if part else (E.UNKNOWN_TOPIC_ID if name is None else E.UNKNOWN_TOPIC_OR_PARTITION)
                if part is None and (name, p.partition) in self.partitions.damaged:
                    error = E.KAFKA_STORAGE_ERROR       # damaged committed data: see `seglog repair`
                wanted.append((name, tid, p, part, error))
        while True:
            waits = [part.next_commit() for _, _, _, part, _ in wanted if part is not None]
            results, total, failed = await asyncio.to_thread(self._read_all, wanted, isolation, max_bytes)
            remaining = deadline - loop.time()
            if total >= body.min_bytes or failed or remaining <= 0 or not waits:
                break
            _close_records(results)           # not enough yet: wait, then read again
            await asyncio.wait(waits, timeout=remaining)
            if loop.time() >= deadline:
                results, total, failed = await asyncio.to_thread(self._read_all, wanted, isolation, max_bytes)
                break
        topics: dict[Any, dict] = {}
        for (name, tid, _, _, _), res in zip(wanted, results):
            key = tid if v >= 13 else name
            topic = topics.get(key)
            if topic is None:
                topic = topics[key] = {"topic": name, "topic_id": tid, "partitions": []}
            topic["partitions"].append(res)
        return encode_fetch_response(correlation_id, v, {
            "throttle_time": 0, "error_code": E.NONE, "session_id": 0, "responses": list(topics.values())})

    def _fetch_names_unknown(self, body, v: int) -> bool:
        for t in body.topics:
            name = self.partitions.topic_ids.get(t.topic_id.bytes) if v >= 13 else t.topic
            if name is None or any(self.partitions.get(name, p.partition) is None for p in t.partitions):
                return True
        return False

    def _read_all(self, wanted, isolation: str, max_bytes: int) -> tuple[list[dict], int, bool]:
        results = []
        total = 0
        failed = False
        for name, tid, p, part, error in wanted:
            res = {"partition_index": p.partition, "error_code": error, "high_watermark": -1,
                   "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                   "aborted_transactions": None, "records": b""}
            results.append(res)
            if part is None:
                failed = True
                continue
            log = part.log
            try:
                budget = min(p.partition_max_bytes, max_bytes - total)
                if budget <= 0 and total > 0:
                    fetched = None
                else:
                    fetched = log.read(p.fetch_offset, max(budget, 0), isolation=isolation,
                                       min_one_batch=total == 0, zero_copy=True)
            except SegLogError as exc:
                if isinstance(exc, CorruptRecordError):
                    _log_damage(name, p.partition, p.fetch_offset, exc)
                res["error_code"] = E.error_code(exc)
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset)
                failed = True
                continue
            if fetched is None:
                res.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                           log_start_offset=log.log_start_offset)
                continue
            data = fetched.data
            if isinstance(data, FileSlice):
                if data.size < SENDFILE_MIN_BYTES:
                    with data:         # a small range is cheaper copied than sent with sendfile
                        data = data.read()
                else:                  # a consumer reading history: read this and the next range ahead
                    data.prefetch(ahead=data.size)
            res.update(high_watermark=fetched.high_watermark, last_stable_offset=fetched.last_stable_offset,
                       log_start_offset=fetched.log_start_offset, records=data)
            if isolation == "read_committed":
                res["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                               for a in fetched.aborted]
            total += len(data)
        return results, total, failed


    # ------------------------------------------------------------------ group coordinator
    async def find_coordinator(self, req: Request) -> dict:
        body = req.body
        key_type = getattr(body, "key_type", 0)
        if key_type != 0:
            # No transaction coordinator. COORDINATOR_NOT_AVAILABLE made clients retry until
            # their timeout; librdkafka's transactional producer fails init_transactions() at
            # once only on TRANSACTIONAL_ID_AUTHORIZATION_FAILED (or CLUSTER_AUTHORIZATION_FAILED),
            # and Java's and kafka-python's treat it as fatal too, so that is the answer, with a
            # message that says why.
            return {"throttle_time": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "error_message": "transactions are not supported by this broker (seglog): "
                                     "use an idempotent producer without transactional.id",
                    "node_id": -1, "host": "", "port": -1}
        # The one broker coordinates every group. __consumer_offsets is created at the first
        # JoinGroup or OffsetCommit, not here: assign() consumers ask too and never need it.
        return {"throttle_time": 0, "error_code": E.NONE, "error_message": None,
                "node_id": self.node_id, "host": self.host, "port": self.port}

    async def describe_groups(self, req: Request) -> dict:
        return {"throttle_time": 0, "groups": [self.groups.describe(g) for g in req.body.groups]}

    async def list_groups(self, req: Request) -> dict:
        """ListGroups: every group this coordinator knows (all are classic groups), filtered by
        state (v4+) and type (v5+) as Kafka does."""
        states = {s.lower() for s in getattr(req.body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req.body, "types_filter", ()) or ()}
        groups = []
        if not types or "classic" in types:
            for group in list(self.groups.groups.values()):
                if states and group.state.lower() not in states:
                    continue
                groups.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state, "group_type": "classic"})
        return {"throttle_time": 0, "error_code": E.NONE, "groups": groups}

    async def join_group(self, req: Request) -> Result:
        b = req.body
        session_ms = int(b.session_timeout.total_seconds() * 1000)
        rebalance = getattr(b, "rebalance_timeout", None)
        return self.groups.join(
            group_id=b.group_id, member_id=b.member_id,
            group_instance_id=getattr(b, "group_instance_id", None), client_id=req.client_id or "",
            client_host="", session_timeout_ms=session_ms,
            rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms,
            protocol_type=b.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in b.protocols],
            require_known_member=req.api_version >= 4)

    async def sync_group(self, req: Request) -> Result:
        b = req.body
        return self.groups.sync(group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id,
                                assignments=[(a.member_id, bytes(a.assignment)) for a in b.assignments])

    async def heartbeat(self, req: Request) -> dict:
        b = req.body
        return {"throttle_time": 0, "error_code": self.groups.heartbeat(
            group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id)}

    async def leave_group(self, req: Request) -> dict:
        b = req.body
        (code,) = self.groups.leave(b.group_id, [b.member_id])
        return {"throttle_time": 0, "error_code": code}

    async def offset_commit(self, req: Request) -> Result:
        b = req.body
        generation = b.generation_id_or_member_epoch
        code = self.groups.check_commit(b.group_id, generation, b.member_id)
        results: list[tuple[str, int, int]] = []
        offsets: dict[tuple[str, int], OT.CommittedOffset] = {}
        now = int(time.time() * 1000)
        for t in b.topics:
            for p in t.partitions:
                error = code
                if error == E.NONE:
                    if self.partitions.get(t.name, p.partition_index) is None:
                        error = E.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.committed_metadata is not None and \
                            len(p.committed_metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                        error = E.OFFSET_METADATA_TOO_LARGE
                    else:
                        offsets[(t.name, p.partition_index)] = OT.CommittedOffset(
                            p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                            p.committed_metadata or "", now)
                results.append((t.name, p.partition_index, error))

        async def finish() -> dict:
            stored = await self.groups.commit_offsets(b.group_id, offsets)
            by_topic: dict[str, list] = {}
            for topic, index, error in results:
                if error == E.NONE:
                    error = stored
                by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": error})
            return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        return finish()

    async def offset_fetch(self, req: Request) -> dict:
        b = req.body
        v = req.api_version
        if v >= 8:
            groups = [(g.group_id, None if g.topics is None else
                       [(t.name, list(t.partition_indexes)) for t in g.topics]) for g in b.groups]
        else:
            groups = [(b.group_id, None if b.topics is None else
                       [(t.name, list(t.partition_indexes)) for t in b.topics])]
        answers = []
        for group_id, topics in groups:
            found = self.groups.committed(group_id, topics)
            answers.append({"group_id": group_id, "error_code": E.NONE, "topics": [
                {"name": t, "partitions": [
                    {"partition_index": p, "error_code": E.NONE,
                     "committed_offset": c.offset if c else -1,
                     "committed_leader_epoch": c.leader_epoch if c else -1,
                     "metadata": c.metadata if c else ""} for p, c in parts]}
                for t, parts in found]})
        if v >= 8:
            return {"throttle_time": 0, "groups": answers}
        return {"throttle_time": 0, "error_code": E.NONE, "topics": answers[0]["topics"]}

    async def offset_for_leader_epoch(self, req: Request) -> dict:
        topics = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                res = {"partition": p.partition, "error_code": E.NONE, "leader_epoch": -1, "end_offset": -1}
                part = self.partitions.get(t.topic, p.partition)
                if part is None:
                    res["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    log = part.log
                    current = getattr(p, "current_leader_epoch", -1)
                    if current >= 0 and current < log.leader_epoch:
                        res["error_code"] = E.FENCED_LEADER_EPOCH
                    elif current > log.leader_epoch:
                        res["error_code"] = E.UNKNOWN_LEADER_EPOCH
                    else:
                        # From the leader-epoch cache, as Kafka: the end of the requested epoch.
                        epoch, end = log.epoch_cache.end_offset_for(p.leader_epoch, log.log_end_offset)
                        res.update(leader_epoch=epoch, end_offset=end)
                parts.append(res)
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}


class _Failed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _close_records(results: list[dict]) -> None:
    for res in results:
        if isinstance(res["records"], FileSlice):
            res["records"].close()


def _consume_exception(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


def _produce_result(index: int, error: int, *, base_offset: int = -1, log_append_time: int = -1,
                    log_start_offset: int = -1, message: str | None = None) -> dict:
    return {"index": index, "error_code": error, "base_offset": base_offset,
            "log_append_time": log_append_time, "log_start_offset": log_start_offset,
            "record_errors": [], "error_message": message}


def _max_timestamp_offset(log) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp below the HW (ListOffsets -3)."""
    best = None
    for seg in log.segments:
        ts = seg.largest_timestamp
        if ts >= 0 and (best is None or ts > best.largest_timestamp):
            best = seg
    if best is None:
        return None
    seg = best
    found = seg.find_offset_by_timestamp(seg.largest_timestamp, log.log_start_offset)
    if found is None or found[0] >= log.high_watermark:
        return None
    return found


def _cluster_id(root: LogRoot) -> str:
    try:
        return root.cluster_id() or "seglog"
    except SegLogError:
        return "seglog"
