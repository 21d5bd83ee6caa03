"""What brokers and tools ask of the controller, as znodes it watches: preferred and unclean leader
elections, partition reassignments (one pending request of each kind at a time, consumed at the
version read), controlled shutdowns (ephemeral, one per broker), and ISR change notifications
(sequential). Handed out by ZooKeeperStore as `store.requests`."""
from __future__ import annotations

from collections.abc import Callable

from logcore.cluster.znode_json import dumps, loads, partitions_from_json, partitions_json
from logcore.cluster.znode_paths import (CONTROLLED_SHUTDOWN, ISR_CHANGE_PREFIX, ISR_CHANGES, PREFERRED_ELECTION,
                                         REASSIGN_PARTITIONS, UNCLEAN_ELECTION, controlled_shutdown_path,
                                         isr_change_path)
from logcore.cluster.zookeeper_session import ZooKeeperSession, coordinator_errors
from logcore.errors import CorruptRecordError, ZkVersionConflictError


class AdminRequests:
    def __init__(self, session: ZooKeeperSession):
        self._session = session
        self.client = session.client
        self.hosts = session.hosts

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> str:
        """A leader that changed ISRs tells the controller (it then refreshes metadata)."""
        return self.client.create(ISR_CHANGE_PREFIX, partitions_json(partitions), sequence=True)

    def isr_change_notifications(self) -> dict[str, list[tuple[str, int]]]:
        """{notification name: [(topic, partition)]}, oldest first."""
        from kazoo.exceptions import NoNodeError
        out = {}
        for name in sorted(self.client.get_children(ISR_CHANGES)):
            path = isr_change_path(name)
            try:
                raw, _ = self.client.get(path)
            except NoNodeError:
                continue
            out[name] = partitions_from_json(raw, path)
        return out

    def delete_isr_change_notifications(self, names) -> None:
        from kazoo.exceptions import NoNodeError
        for name in names:
            try:
                self.client.delete(isr_change_path(name))
            except NoNodeError:
                pass

    def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        """Kafka's /admin/preferred_replica_election (one pending request at a time)."""
        from kazoo.exceptions import NodeExistsError
        try:
            self.client.create(PREFERRED_ELECTION, partitions_json(partitions))
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"a preferred replica election is already pending ({PREFERRED_ELECTION})") from None

    def request_unclean_election(self, partitions: list[tuple[str, int]]) -> None:
        """seglog's /admin/unclean_leader_election (one pending request at a time)."""
        from kazoo.exceptions import NodeExistsError
        try:
            self.client.create(UNCLEAN_ELECTION, partitions_json(partitions))
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"an unclean leader election is already pending ({UNCLEAN_ELECTION})") from None

    def pending_preferred_elections(self) -> tuple[list[tuple[str, int]], int] | None:
        """The partitions of the pending preferred-replica election request and its znode
        version (for `finish_preferred_elections`); None when there is none."""
        return self._pending_elections(PREFERRED_ELECTION)

    def pending_unclean_elections(self) -> tuple[list[tuple[str, int]], int] | None:
        """The same for the pending unclean leader election request."""
        return self._pending_elections(UNCLEAN_ELECTION)

    def finish_preferred_elections(self, version: int) -> None:
        """Consume the preferred election request read at `version` (a newer one stays)."""
        self._finish_request(PREFERRED_ELECTION, version)

    def finish_unclean_elections(self, version: int) -> None:
        self._finish_request(UNCLEAN_ELECTION, version)

    def finish_reassignments(self, version: int) -> None:
        """Consume the reassignment request read at `version` (a newer one stays)."""
        self._finish_request(REASSIGN_PARTITIONS, version)

    def watch_admin_requests(self, fn: Callable[[], None]) -> None:
        """fn() now and whenever a request for the controller appears, changes or goes: preferred
        and unclean elections, partition reassignments (fn means "re-read")."""
        for path in (PREFERRED_ELECTION, UNCLEAN_ELECTION, REASSIGN_PARTITIONS):
            self.client.DataWatch(path, lambda _data, _stat: fn())

    def watch_controlled_shutdowns(self, fn: Callable[[set[int]], None]):
        """fn(ids of the brokers announcing a controlled shutdown) now and on every change."""
        self.client.ensure_path(CONTROLLED_SHUTDOWN)
        return self.client.ChildrenWatch(
            CONTROLLED_SHUTDOWN, lambda children: fn({int(c) for c in children if c.isdigit()}))

    def _pending_elections(self, path: str) -> tuple[list[tuple[str, int]], int] | None:
        """The partitions of a pending election request at `path` and its znode version."""
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return partitions_from_json(raw, path), stat.version

    def _finish_request(self, path: str, version: int) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError
        try:
            self.client.delete(path, version=version)
        except (NoNodeError, BadVersionError):     # a newer request stays for the next pass
            pass

    @coordinator_errors
    def announce_controlled_shutdown(self, broker_id: int, timeout_s: float | None = None) -> None:
        """This broker is stopping: the controller moves its leaderships and ISR memberships.
        Ephemeral: it goes with the session. Waits at most `timeout_s` for ZooKeeper."""
        from kazoo.exceptions import NodeExistsError
        try:
            self._session.bounded(self.client.create_async(controlled_shutdown_path(broker_id), b"",
                                                           ephemeral=True, makepath=True),
                                  timeout_s, "announcing a controlled shutdown")
        except NodeExistsError:
            pass

    def shutting_down(self) -> set[int]:
        from kazoo.exceptions import NoNodeError
        try:
            return {int(c) for c in self.client.get_children(CONTROLLED_SHUTDOWN) if c.isdigit()}
        except NoNodeError:
            return set()

    def request_reassignments(self, targets: dict[tuple[str, int], list[int] | None]) -> None:
        """Hand reassignments to the controller through /admin/reassign_partitions (Kafka's
        znode and JSON; seglog's `"replicas": null` cancels). One pending request at a time:
        ZkVersionConflictError while another one is there."""
        from kazoo.exceptions import NodeExistsError
        doc = {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
            for (t, p), r in sorted(targets.items())]}
        try:
            self.client.create(REASSIGN_PARTITIONS, dumps(doc), makepath=True)
        except NodeExistsError:
            raise ZkVersionConflictError(
                f"a partition reassignment request is already pending ({REASSIGN_PARTITIONS})") from None

    def pending_reassignments(self) -> tuple[dict[tuple[str, int], tuple[int, ...] | None], int] | None:
        """The pending /admin/reassign_partitions request ({(topic, partition): replicas or
        None to cancel}) and its znode version; None when there is none."""
        from kazoo.exceptions import NoNodeError
        try:
            raw, stat = self.client.get(REASSIGN_PARTITIONS)
        except NoNodeError:
            return None
        out = {}
        for i, d in enumerate(loads(raw, REASSIGN_PARTITIONS).get("partitions", [])):
            try:
                replicas = d.get("replicas")
                out[(str(d["topic"]), int(d["partition"]))] = \
                    None if replicas is None else tuple(int(b) for b in replicas)
            except (KeyError, TypeError, ValueError) as e:
                raise CorruptRecordError(f"{REASSIGN_PARTITIONS}: partitions[{i}] lacks or mangles {e}",
                                         file=REASSIGN_PARTITIONS) from None
        return out, stat.version


_WRAPPED = ("notify_isr_change", "isr_change_notifications", "delete_isr_change_notifications",
            "request_preferred_election", "request_unclean_election", "pending_preferred_elections",
            "pending_unclean_elections", "finish_preferred_elections", "finish_unclean_elections",
            "finish_reassignments", "watch_admin_requests", "watch_controlled_shutdowns",
            "shutting_down", "request_reassignments", "pending_reassignments")
for _name in _WRAPPED:
    setattr(AdminRequests, _name, coordinator_errors(getattr(AdminRequests, _name)))
