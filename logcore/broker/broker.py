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
from dataclasses import dataclass
from typing import Awaitable, NamedTuple

from logcore.wire import error_codes as E
from logcore.event_wait import wait_all
from logcore.broker.api_versions import CLUSTER_SERVED, SERVED, advertised
from logcore.coordinator import offsets_topic as OT
from logcore.broker.access_rules import RequestAccess
from logcore.broker.acl_handlers import AclHandlers
from logcore.broker.admin_handlers import AdminHandlers
from logcore.broker.topic_catalog import ClusterTopics, LocalTopics
from logcore.broker.cluster_handlers import ClusterHandlers
from logcore.broker.config_handlers import ConfigHandlers
from logcore.broker.scram_handlers import ScramHandlers, UserCredentials
from logcore.security.client_security import inter_broker_security
from logcore.broker.cluster_fetch import ClusterFetch
from logcore.broker.config import BrokerConfig
from logcore.broker.describe_handlers import (DescribeHandlers, auto_create_asked, failed_topic,
                                              with_authorized_operations)
from logcore.broker.error_response import error_response
from logcore.broker.resources import open_partition_budget
from logcore.broker.fetch_handlers import FetchHandlers
from logcore.broker.fetch_response import EncodedResponse
from logcore.broker.group_handlers import GroupHandlers
from logcore.broker.consumer_group_handlers import (ConsumerGroupHandlers, consumer_group_settings,
                                                    consumer_protocol_enabled, topic_image)
from logcore.coordinator.consumer_group_coordinator import ConsumerGroupCoordinator
from logcore.coordinator.group_coordinator import GroupCoordinator
from logcore.broker.log_dir_failure import LogDirFailureChannel
from logcore.broker.maintenance import BrokerMaintenance
from logcore.broker.offset_handlers import OffsetHandlers
from logcore.broker.membership import Membership
from logcore.broker.partitions import PartitionManager
from logcore.broker.producer_ids import MAX_EPOCH, ProducerIdAllocator
from logcore.broker.quota_handlers import QuotaHandlers, ThrottledResponse
from logcore.broker.reassignment_handlers import ReassignmentHandlers
from logcore.broker.records_handlers import RecordsHandlers
from logcore.broker import transaction_handlers
from logcore.broker.transaction_handlers import TransactionHandlers
from logcore.coordinator.transaction_coordinator import TransactionCoordinator, TxnSettings
from logcore.coordinator import transaction_log as TL
from logcore.errors import SegLogError, TopicExistsError
from logcore.log.config import MaintenanceConfig
from logcore.log.log_root import LogRoot
from logcore.metrics.broker_metrics import BrokerMetrics
from logcore.metrics.fetch_session_metrics import FetchSessionMetrics
from logcore.quota.client_quota_configs import ClientQuotaConfigs
from logcore.quota.client_quotas import ClientQuotas
from logcore.quota.replication_quota import ReplicationQuotas
from logcore.quota.root_quota_store import RootQuotaStore
from logcore.security.acl_store import RootAclStore, ZooKeeperAclStore
from logcore.security.authorizer import authorizer_for
from logcore.tiered import install_remote_tier
from logcore.wire.produce_codec import encode_produce_results
from logcore.security.acl import AclOperation

install_remote_tier()  # roots that enable tiering have a remote tier

WRITE = AclOperation.WRITE
from logcore.wire.protocol import ZERO_UUID, Request

logger = logging.getLogger(__name__)

INT32_MIN = -(2 ** 31)

Result = dict | bytes | EncodedResponse | None | Awaitable[dict | bytes | EncodedResponse | None]


@dataclass(slots=True)
class ProduceEntry:
    """One partition of a Produce request: its batch submitted (`appended`, the future of its
    AppendInfo) or refused before appending (`error`, `message`)."""
    topic: str
    index: int
    part: object = None                          # partition_log.PartitionLog, when submitted
    appended: asyncio.Future | None = None
    error: int = E.NONE
    message: str | None = None


class ProduceResult(NamedTuple):
    """One partition's answer, in the field order encode_produce_results reads."""
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list | tuple = ()


async def _appended(entries: list[ProduceEntry]) -> None:
    """Until every submitted append of a produce is done (most are already: an append that
    needs no flush or roll completes in submit)."""
    pending = [e.appended for e in entries if e.appended is not None and not e.appended.done()]
    if pending:
        await wait_all(pending)


class Broker:
    """Dispatches each request by API key (`handlers`) to its handler: Produce, ListOffsets,
    Metadata, ApiVersions, InitProducerId and OffsetForLeaderEpoch here; the others to the
    handler groups it holds, each built with the collaborators it uses: Fetch (`fetching`,
    fetch_handlers.py), the consumer group APIs (`group_api`, group_handlers.py), CreateTopics,
    DeleteTopics and CreatePartitions (`admin`, admin_handlers.py), Describe/Alter/
    IncrementalAlterConfigs (`configs`, config_handlers.py), and for a
    cluster member the cluster's answers (`cluster_api`, cluster_handlers.py) and reassignments
    (`reassignments`, reassignment_handlers.py). What they share that join_cluster changes is
    the `membership` they read at each request."""

    def __init__(self, config: BrokerConfig, root: LogRoot, advertised: tuple[str, int],
                 log_dir_failure: LogDirFailureChannel | None = None, metrics: BrokerMetrics | None = None):
        self.config = config
        # What an operator watches (logcore.metrics): the server serves it when metrics.listener is set.
        self.metrics = metrics or BrokerMetrics()
        self.root = root
        self.node_id = config.node_id
        self.host, self.port = advertised
        self.partitions = PartitionManager(
            root, open_partition_budget(config["log.max.open.partitions"]))
        # A write of the log dir that fails (ENOSPC, EIO, ...) takes it offline; with it the
        # broker's only log dir, the channel's policy stops the broker (KIP-112).
        self.log_dir_failure = log_dir_failure or LogDirFailureChannel(config.log_dir)
        self.partitions.log_dir_failure = self.log_dir_failure
        self.producer_ids = ProducerIdAllocator(root.storage)
        self.background: set[asyncio.Task] = set()
        # Who may do what (authorizer.class.name): ACLs in the log root alone, in ZooKeeper in a
        # cluster (join_cluster); every request passes the rules of access_rules.py.
        self.authorizer = authorizer_for(config["authorizer.class.name"], lambda: RootAclStore(root.storage),
                                         config["super.users"], config["allow.everyone.if.no.acl.found"])
        self.access = RequestAccess(self.authorizer, self._brokers, self._topic_name_of)
        # A cluster member (zookeeper.connect): join_cluster changes it before the broker serves.
        self.membership = Membership(_cluster_id(root))
        self.metadata_topic = None      # __remote_log_metadata's client (join_cluster)
        self.groups = GroupCoordinator(
            self.partitions, self._ensure_offsets_topic,
            num_partitions=config["offsets.topic.num.partitions"],
            initial_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_ms=config["group.min.session.timeout.ms"],
            max_session_ms=config["group.max.session.timeout.ms"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            retention_check_ms=config["offsets.retention.check.interval.ms"])
        # Transactions (transaction_handlers.py): the coordinator of transactional producers.
        self.txn = TransactionCoordinator(
            self.partitions, self._ensure_txn_topic, lambda: self.producer_ids.allocate(),
            TxnSettings(num_partitions=config["transaction.state.log.num.partitions"],
                        max_timeout_ms=config["transaction.max.timeout.ms"],
                        abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                        id_expiration_ms=config["transactional.id.expiration.ms"],
                        remove_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                        commit_timeout_s=config["offsets.commit.timeout.ms"] / 1000),
            on_offsets_marker=self.groups.offsets.on_marker)
        self.transactions = TransactionHandlers(self.txn, self.groups, config, advertised, self.partitions,
                                                self.membership)
        self.maintenance = BrokerMaintenance(
            self.partitions, MaintenanceConfig.from_props(config.log_defaults),
            tiering_interval_ms=config["remote.log.manager.task.interval.ms"], broker_id=self.node_id)
        self.admin = AdminHandlers(config, root, self.partitions, self.membership)
        # Describe/Alter/IncrementalAlterConfigs (config_handlers.py); dynamic broker configs
        # are read before any log opens.
        # Replication throttles (docs/quotas.md): rates from the dynamic broker configs, used by
        # the leader's Fetch path and the follower's fetcher of a cluster member.
        self.replication_quotas = ReplicationQuotas(config["replication.quota.window.num"],
                                                    config["replication.quota.window.size.seconds"])
        self.configs = ConfigHandlers(config, root, self.partitions, self.replication_quotas)
        self.configs.start()
        # Users' SCRAM credentials in the dynamic config store (scram_handlers.py): SASL logins read them.
        self.scram = ScramHandlers(lambda: self.configs.dynamic.store)
        self.credentials = UserCredentials(lambda: self.configs.dynamic.store)
        self.inter_broker_security = inter_broker_security(config.security.listener(config.inter_broker_listener),
                                                           config.security.inter_broker_mechanism, config.source)
        self.maintenance.clean_listeners.append(self.metrics.cleaner.cleaned)
        # Client quotas (logcore.quota, docs/quotas.md): read before serving, enforced per request
        # (Produce here, Fetch in fetch_handlers, every request's handling time in the server).
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
        self.quota_configs = ClientQuotaConfigs(self.quotas, RootQuotaStore(root.storage))
        self.quota_configs.start()
        self.offset_api = OffsetHandlers(self.partitions)     # ListOffsets, OffsetForLeaderEpoch
        self.fetching = FetchHandlers(config, self.partitions, self.membership, self.metrics.topics,
                                      self.access, self.quotas)
        self.metrics.add(FetchSessionMetrics(self.fetching.sessions.cache))
        self.group_api = GroupHandlers(self.groups, config, advertised, self.membership, self.transactions)
        self.cluster_api = ClusterHandlers(config, self.membership)
        self.reassignments = ReassignmentHandlers(self.membership)
        self.describing = DescribeHandlers(config, advertised, root, self.partitions, self.membership)
        self.records = RecordsHandlers(self.partitions)
        self.membership.topic_catalog = LocalTopics(self.local_metadata, self.admin, self.group_api,
                                                    self.partitions)
        admin, groups = self.admin, self.group_api
        self.handlers = {
            0: self.produce, 1: self.fetching.fetch, 2: self.offset_api.list_offsets, 3: self.metadata,
            8: groups.offset_commit, 9: groups.offset_fetch, 10: groups.find_coordinator,
            11: groups.join_group, 12: groups.heartbeat, 13: groups.leave_group, 14: groups.sync_group,
            15: groups.describe_groups, 16: groups.list_groups,
            18: self.api_versions, 19: admin.create_topics, 20: admin.delete_topics,
            22: self.init_producer_id, 23: self.offset_api.offset_for_leader_epoch,
            32: self.configs.describe_configs, 33: self.configs.alter_configs,
            37: admin.create_partitions, 44: self.configs.incremental_alter_configs,
            74: self.configs.list_config_resources,
            21: self.records.delete_records, 42: groups.delete_groups, 47: groups.offset_delete,
            **self.transactions.handlers(),
            **self.describing.handlers(), **self.scram.handlers(),
            **AclHandlers(self.authorizer).handlers(),
            **QuotaHandlers(self.quota_configs).handlers(),
        }
        self.served = dict(SERVED)
        # KIP-848's consumer group protocol beside the classic one (consumer_group_handlers.py).
        if consumer_protocol_enabled(config):
            self.groups.consumer_groups = ConsumerGroupCoordinator(
                self.groups, lambda: topic_image(self.membership, self.partitions), consumer_group_settings(config),
                self.configs.groups)
            self.handlers.update(ConsumerGroupHandlers(self.groups.consumer_groups, groups, self.authorizer).handlers())
        else:
            del self.served[68], self.served[69]

    @property
    def cluster_id(self) -> str:
        return self.membership.cluster_id

    @property
    def replica_manager(self):
        """logcore.replication.replica_manager.ReplicaManager: a cluster member's (else None)."""
        return self.membership.replica_manager

    @property
    def catalog(self):
        """logcore.cluster.catalog.ZooKeeperCatalog: a cluster member's (else None)."""
        return self.membership.catalog

    @property
    def replication(self):
        """What the data path asks (leadership, the produce checks, how logs open, the step
        after an append): replication.single_node.SingleNode for one broker alone, the
        ReplicaManager once it joins a cluster. The PartitionManager holds it."""
        return self.partitions.replication

    @property
    def cluster(self):
        """The replica manager under its former name (the cluster tests read it so)."""
        return self.replica_manager

    def join_cluster(self, store, catalog, cluster_id: str) -> None:
        """Serve as a member of the cluster whose metadata `store` (ZooKeeper) holds: topics
        from the catalog, leadership and replication from the replica manager."""
        from logcore.replication.replica_manager import ReplicaManager
        from logcore.broker.producer_ids import ClusterProducerIdAllocator
        self.producer_ids = ClusterProducerIdAllocator(store, self.node_id)
        replica_manager = ReplicaManager(self, store, catalog)
        m = self.membership
        m.cluster_id, m.catalog, m.replica_manager = cluster_id, catalog, replica_manager
        m.fetch_checks = ClusterFetch(replica_manager)
        m.topic_catalog = ClusterTopics(self.cluster_api, self.group_api, replica_manager)
        self.partitions.replication = replica_manager
        self.maintenance.role = replica_manager.role_of
        # Groups follow the leadership of their __consumer_offsets partition.
        self.groups.attach_cluster(replica_manager, self.config["offsets.commit.timeout.ms"])
        # Transactional ids follow the leadership of their __transaction_state partition.
        self.txn.attach_cluster(replica_manager, self._connect_broker)
        self.handlers.update({43: self.cluster_api.elect_leaders,
                              45: self.reassignments.alter_partition_reassignments,
                              46: self.reassignments.list_partition_reassignments})
        self.served.update(CLUSTER_SERVED)
        self.configs.attach_cluster(store, replica_manager)
        if self.authorizer.enabled:
            self.authorizer.store = ZooKeeperAclStore(store.client)
        from logcore.quota.zookeeper_quota_store import ZooKeeperQuotaStore
        self.quota_configs.attach(ZooKeeperQuotaStore(store.client))
        # TopicBasedRemoteLogMetadataManager: remote segment metadata in __remote_log_metadata.
        from logcore.broker.remote_metadata_topic import attach_metadata_topic
        self.metadata_topic = attach_metadata_topic(self.root.remote_tier(), replica_manager, catalog, self.node_id)

    def open(self) -> None:
        """Open every partition (blocking) and rebuild the groups from __consumer_offsets (a
        cluster member loads them partition by partition as it becomes leader instead).
        With tiered storage, a remote root that cannot be written fails the start."""
        tier = self.root.remote_tier()
        if tier is not None:
            tier.check_access()
            self.metrics.remote.read_from(tier.metrics.snapshot)     # logcore.tiered.metrics' totals
        self.partitions.open_all()
        # the tier records this broker's id; deletions a killed broker left unfinished go on
        self.root.resume_remote_deletions(self.node_id)
        if self.groups.loads_at_open():
            self.groups.load()
        if self.txn.loads_at_open():
            self.txn.load()

    async def start(self) -> None:
        await asyncio.to_thread(self.authorizer.start)
        await self.replication.start()
        await self.groups.start()
        await self.txn.start()
        self.maintenance.start()

    async def stop(self) -> None:
        await self.replication.stop()
        await self.groups.stop()
        await self.txn.stop()
        await asyncio.to_thread(self.maintenance.stop)

    def close(self) -> None:
        if self.metadata_topic is not None:
            self.metadata_topic.close()
        self.partitions.close()

    def _ensure_offsets_topic(self) -> None:
        """Create the compacted __consumer_offsets topic at first use (blocking)."""
        if OT.TOPIC in self.partitions.topics:
            return
        try:
            self.admin.create_topic(OT.TOPIC, self.config["offsets.topic.num.partitions"], {
                **OT.TOPIC_CONFIG, "segment.bytes": str(self.config["offsets.topic.segment.bytes"])})
            logger.info("created %s (%d partitions, compacted)", OT.TOPIC,
                        self.config["offsets.topic.num.partitions"])
        except TopicExistsError:
            self.partitions.open_topic(self.root.describe_topic(OT.TOPIC))

    def _ensure_txn_topic(self) -> None:
        """Create the compacted __transaction_state topic at first use (blocking)."""
        if TL.TOPIC in self.partitions.topics:
            return
        try:
            self.admin.create_topic(TL.TOPIC, self.config["transaction.state.log.num.partitions"],
                                    transaction_handlers.txn_topic_config(self.config))
            logger.info("created %s (%d partitions, compacted)", TL.TOPIC,
                        self.config["transaction.state.log.num.partitions"])
        except TopicExistsError:
            self.partitions.open_topic(self.root.describe_topic(TL.TOPIC))

    async def _connect_broker(self, node: int):
        """An inter-broker connection to cluster member `node` (the marker writer's)."""
        from logcore.wire.client import AsyncKafkaConnection
        address = self.replica_manager.address_of(node)
        if address is None:
            raise ConnectionError(f"broker {node} is not registered")
        conn = AsyncKafkaConnection(address[0], address[1], timeout_s=30.0, client_id=f"txn-markers-{self.node_id}",
                                    security=self.inter_broker_security)
        return await conn.connect()

    async def handle(self, request: Request) -> Result:
        """The handler's answer; a handler that fails unexpectedly is answered with an error
        code for what the request named (one log line), never by dropping the connection."""
        try:
            result = await self.access.handle(request, self.handlers[request.api_key])
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
        answer = error_response(request, code, message, self._brokers())
        logger.error("request api key %d v%d (correlation id %d, client %s) failed: %s; answered"
                     " error code %d%s", request.api_key, request.api_version, request.correlation_id,
                     request.client_id, message, code, "" if answer is not None else " by closing the connection")
        logger.debug("request failure", exc_info=exc)
        if answer is None:
            raise exc
        return answer

    def _topic_name_of(self, topic_id) -> str | None:
        """The name of the topic with this id (a UUID), or None (DeleteTopics by id is
        authorized on the name it deletes)."""
        rm = self.membership.replica_manager
        if rm is None:
            return self.partitions.topic_ids.get(topic_id.bytes)
        from logcore.log.partition_metadata import parse_topic_id
        return next((n for n, ta in rm.assignments.items()
                     if ta.topic_id and parse_topic_id(ta.topic_id) == topic_id), None)

    def _brokers(self) -> list[dict]:
        return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]

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
    async def metadata(self, req: Request) -> dict:
        return with_authorized_operations(req.body, await self.membership.topic_catalog.metadata(req.body))

    async def local_metadata(self, body) -> dict:
        if body.topics is None:
            names = sorted(self.partitions.topics)
        else:
            names = []
            for t in body.topics:
                name = t.name
                if name is None and getattr(t, "topic_id", None) not in (None, ZERO_UUID):
                    name = self.partitions.topic_ids.get(t.topic_id.bytes)
                names.append(name)
        allow_create = auto_create_asked(body, self.config)
        # Topics another process created, grew or removed in the root since the last request.
        await asyncio.to_thread(self.partitions.refresh_topics)
        topics = []
        for name in names:
            if name is None:
                topics.append(failed_topic(E.UNKNOWN_TOPIC_ID, None))
                continue
            error = E.NONE
            if name not in self.partitions.topics:
                error = E.UNKNOWN_TOPIC_OR_PARTITION
                if allow_create:
                    error = await asyncio.to_thread(self.admin.auto_create, name)
            if error != E.NONE:
                topics.append(failed_topic(error, name))
                continue
            info = self.partitions.topics.get(name)
            if info is None:      # gone meanwhile (deleted by another request)
                topics.append(failed_topic(E.UNKNOWN_TOPIC_OR_PARTITION, name))
                continue
            parts = []
            for p in range(info.partitions):
                part = self.partitions.get(name, p)
                parts.append({"error_code": E.NONE, "partition_index": p, "leader_id": self.node_id,
                              "leader_epoch": part.leader_epoch if part else -1,
                              "replica_nodes": [self.node_id], "isr_nodes": [self.node_id],
                              "offline_replicas": []})
            topics.append({"error_code": E.NONE, "name": name, "topic_id": self.partitions.topic_uuid(name),
                           "is_internal": name.startswith("__"), "partitions": parts,
                           "topic_authorized_operations": INT32_MIN})
        return {"throttle_time": 0,
                "brokers": [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}],
                "cluster_id": self.membership.cluster_id, "controller_id": self.node_id, "topics": topics,
                "cluster_authorized_operations": INT32_MIN}

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, req: Request) -> dict:
        body = req.body
        if body.transactional_id is not None:
            return await self.transactions.init_producer_id(req)
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
            # KIP-890 in a cluster: transactional batches another broker must vouch for first,
            # and the later requests of the same transactional id wait behind them.
            turn = self.transactions.produce_turn(req.body)
            if turn is not None:
                return self._guarded(req, self._produce_in_turn(turn.start(lambda: self._produce_now(req))))
            result = self._produce_now(req)
        except Exception as exc:   # noqa: BLE001
            return self._failed(req, exc)
        if result is not None and not isinstance(result, (dict, bytes)) and inspect.isawaitable(result):
            return self._guarded(req, result)
        return result

    async def _produce_in_turn(self, turn: asyncio.Task) -> Result:
        result = await asyncio.shield(turn)      # submitted in its turn even if this request is dropped
        if result is not None and not isinstance(result, (dict, bytes)) and inspect.isawaitable(result):
            return await result
        return result

    def _produce_now(self, req: Request) -> Result:
        body = req.body
        acks = body.acks
        error = E.NONE
        message = None
        if acks not in (0, 1, -1):
            error, message = E.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of 0, 1, -1"
        elif (refused := self.access.produce_denial(req)) is not None:
            error, message = refused
        if error != E.NONE:
            if acks == 0:
                return None
            return {"responses": [{"name": t.name, "partition_responses": [
                _produce_result(p.index, error, message=message) for p in t.partition_data]}
                for t in body.topic_data], "throttle_time": 0}
        entries = self._submit_all(body, req)
        # the producer's byte rate: the request's records, once per request (Kafka's request size)
        throttle = self.quotas.produced(req, sum(len(pd.records or b"") for t in body.topic_data
                                                 for pd in t.partition_data)) if self.quotas.active else 0
        if acks == 0:
            for entry in entries:
                if entry.appended is not None:
                    entry.appended.add_done_callback(_consume_exception)   # nobody to tell; logged by the worker
            return ThrottledResponse(None, throttle) if throttle else None
        if acks == -1 and self.replication.replicates and any(e.appended is not None for e in entries):
            return self._finish_replicated_produce(entries, req, throttle)
        for e in entries:           # a loop, not all(genexpr): asked once per request
            if e.appended is not None and not e.appended.done():
                return self._finish_produce(entries, req, throttle)
        return self._produce_response(entries, req, None, throttle)       # committed on the loop already

    def _submit_all(self, body, req: Request) -> list[ProduceEntry]:
        """Queue every partition's batch now (keeping this connection's order); errors found
        before appending are answered directly. One entry per partition of the request."""
        out = []
        loop = asyncio.get_running_loop()
        acks_all = body.acks == -1
        produced = self.metrics.topics.produced
        replication, partitions = self.replication, self.partitions      # looked up once per request
        get, submit = partitions.get, partitions.submit
        for t in body.topic_data:
            name = t.name
            if not self.access.topic_allowed(req, WRITE, name):
                out.extend(ProduceEntry(name, pd.index, error=E.TOPIC_AUTHORIZATION_FAILED, message=(
                    f"{req.principal} is not authorized to WRITE topic {name!r}")) for pd in t.partition_data)
                continue
            for pd in t.partition_data:
                part = get(name, pd.index)
                records = pd.records
                code, message = replication.produce_check(name, pd.index, acks_all)
                if code != E.NONE:
                    out.append(ProduceEntry(name, pd.index, error=code, message=message))
                    continue
                if name == OT.TOPIC or name == TL.TOPIC:
                    out.append(ProduceEntry(name, pd.index, error=E.INVALID_TOPIC_EXCEPTION, message=(
                        f"{name} is internal: only its coordinator writes it")))
                elif part is None:
                    partitions.refresh_soon()     # created in the root by another process?
                    out.append(ProduceEntry(name, pd.index, error=E.UNKNOWN_TOPIC_OR_PARTITION,
                                            message=f"{name}-{pd.index} is not a partition of this broker"))
                elif not records:
                    out.append(ProduceEntry(name, pd.index, error=E.INVALID_RECORD, message="no records"))
                elif (len(records) >= 61 and records[22] & 0x10) and (verified := self.transactions.produce_check(
                        body.transactional_id, name, pd.index, records))[0] != E.NONE:
                    out.append(ProduceEntry(name, pd.index, error=verified[0], message=verified[1]))
                else:
                    code, message = replication.append_check(part, acks_all)
                    if code != E.NONE:
                        out.append(ProduceEntry(name, pd.index, error=code, message=message))
                    else:
                        out.append(ProduceEntry(name, pd.index, part, submit(part, records, loop)))
                        produced(name, records)
        return out

    async def _finish_produce(self, entries, req: Request, throttle: int = 0) -> bytes | ThrottledResponse:
        await _appended(entries)
        return self._produce_response(entries, req, None, throttle)

    async def _finish_replicated_produce(self, entries, req: Request, throttle: int = 0) -> bytes | ThrottledResponse:
        """acks=all in a cluster: once appended, each batch waits until the high watermark
        passes it (replication.md 1.8), all of them within the request's timeout."""
        await _appended(entries)
        waits = []
        for i, entry in enumerate(entries):
            fut = entry.appended
            if fut is not None and fut.exception() is None:
                replica = self.replica_manager.replicas.get((entry.topic, entry.index))
                if replica is None:
                    waits.append((i, None, None))
                else:
                    waits.append((i, replica, replica.high_watermark_reached(fut.result().last_offset + 1)))
        pending = [w for _, _, w in waits if w is not None and not w.done()]
        if pending:
            try:
                await wait_all(pending, req.body.timeout_ms / 1000.0)
            finally:
                for _, replica, w in waits:
                    if w is not None and not w.done():
                        replica.forget_waiter(w)
        overrides = {}
        for i, replica, w in waits:
            if w is None:
                overrides[i] = E.NOT_LEADER_OR_FOLLOWER
            elif w.cancelled():
                overrides[i] = E.REQUEST_TIMED_OUT          # the records may still commit
            elif w.result() != E.NONE:
                overrides[i] = w.result()
        return self._produce_response(entries, req, overrides, throttle)

    def _produce_response(self, entries, req: Request, overrides: dict | None = None,
                          throttle: int = 0) -> bytes | ThrottledResponse:
        """The encoded response, once every submitted batch's future is done. `overrides`:
        entry index -> error code for appended batches that did not replicate (acks=all);
        `throttle`: the client's throttle time (ms) under its producer quota."""
        by_topic: dict[str, list] = {}
        for i, entry in enumerate(entries):
            topic, index, part, fut = entry.topic, entry.index, entry.part, entry.appended
            if overrides and i in overrides:
                result = ProduceResult(index, overrides[i], message=(
                    f"{topic}-{index}: appended but not acknowledged by enough replicas (error"
                    f" {overrides[i]})"))
            elif fut is None:
                result = ProduceResult(index, entry.error, message=entry.message)
            else:
                exc = fut.exception()
                if exc is None:
                    info = fut.result()
                    log = part.log_if_open or part.log   # the log just appended to: no pin needed
                    # a plain tuple in ProduceResult's field order: no constructor call per partition
                    result = (index, E.NONE, info.first_offset, info.log_append_time, log.log_start_offset, None)
                elif isinstance(exc, SegLogError):
                    code = E.error_code(exc)
                    logger.info("produce to %s-%d rejected (%s): %s", part.topic, part.index, code, exc)
                    message, record_errors = E.produce_error_detail(exc)
                    result = ProduceResult(index, code, message=message, record_errors=record_errors)
                else:   # an OS error or a bug: this partition only
                    logger.error("produce to %s-%d failed: %r", part.topic, part.index, exc)
                    result = ProduceResult(index, E.error_code(exc), message=str(exc))
            if result[1]:
                self.metrics.requests.error(0, result[1])      # Produce's partition errors
            results = by_topic.get(topic)
            if results is None:
                by_topic[topic] = [result]
            else:
                results.append(result)
        encoded = encode_produce_results(req.correlation_id, req.api_version, list(by_topic.items()), throttle)
        return ThrottledResponse(encoded, throttle) if throttle else encoded


def _consume_exception(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


def _produce_result(index: int, error: int, *, base_offset: int = -1, log_append_time: int = -1,
                    log_start_offset: int = -1, message: str | None = None) -> dict:
    return {"index": index, "error_code": error, "base_offset": base_offset,
            "log_append_time": log_append_time, "log_start_offset": log_start_offset,
            "record_errors": [], "error_message": message}


def _cluster_id(root: LogRoot) -> str:
    try:
        return root.cluster_id() or "seglog"
    except SegLogError:
        return "seglog"
