"""A broker's membership of a cluster (zookeeper.connect): its ZooKeeper session, its
registration under /brokers/ids, its candidacy for controller, and its controlled shutdown.

Start: connect to ZooKeeper and make the broker a cluster member (`Broker.join_cluster`) before
its logs open; once it serves, register it (the broker epoch is the registration's czxid) and
join the controller election. Stop (controlled.shutdown.enable): announce the shutdown, wait
until the controller moved every leadership this broker holds to another in-sync replica (up to
controlled.shutdown.max.retries x controlled.shutdown.retry.backoff.ms), then deregister, so
clients see the new leaders before this broker goes (Kafka's controlled shutdown).
"""
from __future__ import annotations

import asyncio
import logging
import time

from logcore.event_wait import wait_event
from logcore.errors import InvalidConfigError, SegLogError

logger = logging.getLogger(__name__)


class ClusterMember:
    def __init__(self, config, broker):
        self.config = config
        self.broker = broker
        self.store = None
        self.controller = None

    async def connect(self) -> None:
        from logcore.cluster.catalog import ZooKeeperCatalog
        from logcore.cluster.znode_acls import znode_acls
        from logcore.cluster.zookeeper_store import ZooKeeperStore

        if not self.broker.root.storage.is_local:
            raise InvalidConfigError(
                f"{self.config.source}: zookeeper.connect: a cluster member keeps its replicas on local"
                f" disk; log.dirs={self.config.log_dir} is not a local folder")
        security = self.config.security
        self.store = ZooKeeperStore(self.config["zookeeper.connect"],
                                    session_timeout_ms=self.config["zookeeper.session.timeout.ms"],
                                    login=security.zookeeper_login, acls=znode_acls(security.zookeeper_set_acl),
                                    tls=security.zookeeper_tls)
        await asyncio.to_thread(self.store.start)
        catalog = ZooKeeperCatalog(self.store, replication_factor=self.config["default.replication.factor"])
        cluster_id = await asyncio.to_thread(self.store.cluster_id)
        self.broker.join_cluster(self.store, catalog, cluster_id)

    async def register(self, host: str, port: int, endpoints: list[str] | None = None) -> None:
        """`host`, `port`: the inter-broker listener's address; `endpoints`: every listener's."""
        from logcore.cluster.controller import Controller

        protocols = {listener.name: listener.protocol for listener in self.config.listeners}
        epoch = await asyncio.to_thread(self.store.register_broker, self.broker.node_id, host, port, endpoints,
                                        rack=self.config["broker.rack"] or None, protocols=protocols)
        logger.info("broker %d registered in ZooKeeper (%s) at %s:%d, broker epoch %d", self.broker.node_id,
                    self.config["zookeeper.connect"], host, port, epoch)
        self.broker.replica_manager.registered()          # replicas take their roles from here on
        self.controller = Controller(
            self.store, self.broker.node_id,
            unclean_leader_election=self.broker.root.defaults().get(
                "unclean.leader.election.enable", "false").lower() == "true",
            auto_rebalance=self.config["auto.leader.rebalance.enable"],
            rebalance_interval_s=self.config["leader.imbalance.check.interval.seconds"],
            imbalance_percentage=self.config["leader.imbalance.per.broker.percentage"],
            listener_probe=self.config["broker.failure.probe.enable"],
            address_overrides=self.config.address_overrides())
        await asyncio.to_thread(self.controller.start)

    def _zk_wait_s(self) -> float:
        """How long one ZooKeeper call on the stop path may wait: a session timeout, after which
        ZooKeeper itself drops what the call would remove (the registration, /controller)."""
        return self.config["zookeeper.session.timeout.ms"] / 1000.0

    async def shutdown(self) -> None:
        """Controlled shutdown (when enabled), then leave the cluster. Every ZooKeeper call here
        is bounded: a stop always finishes, also with ZooKeeper unreachable."""
        if self.store is None:
            return
        try:
            if self.config["controlled.shutdown.enable"] and self.controller is not None:
                await self._controlled_shutdown()
        except Exception as exc:   # noqa: BLE001 - stopping goes on regardless
            logger.warning("controlled shutdown of broker %d failed: %s; stopping anyway", self.broker.node_id, exc)
        if self.controller is not None:
            await asyncio.to_thread(self.controller.stop, self._zk_wait_s())
        try:
            await asyncio.to_thread(self.store.deregister_broker, self._zk_wait_s())
        except SegLogError as exc:
            logger.warning("broker %d: deregistering failed: %s", self.broker.node_id, exc)

    async def _controlled_shutdown(self) -> None:
        rm = self.broker.replica_manager
        me = self.broker.node_id
        attempts = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000.0
        deadline = time.monotonic() + attempts * max(backoff_s, 0.5)
        # The announcement itself waits no longer than the attempts would (Kafka retries the
        # ControlledShutdown request that many times, then stops anyway).
        await asyncio.to_thread(self.store.announce_controlled_shutdown, me, max(0.5, deadline - time.monotonic()))

        def movable() -> list[tuple[str, int]]:
            # Partitions this broker leads that another live replica could lead.
            out = []
            for key, replica in rm.replicas.items():
                if replica.role != "leader":
                    continue
                others = [b for b in replica.isr if b != me and b in rm.brokers]
                if others:
                    out.append(key)
            return out

        while movable() and time.monotonic() < deadline:
            if not await wait_event(rm.changed, max(0.0, deadline - time.monotonic())):
                break
        left = movable()
        if left:
            logger.warning("broker %d: controlled shutdown: still leading %d partitions with other in-sync"
                           " replicas after %d attempts; stopping anyway", me, len(left), attempts)
        else:
            logger.info("broker %d: controlled shutdown: every leadership moved", me)

    async def close(self) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.close)
            self.store = None
