"""A folder of change notices in ZooKeeper, as Kafka's ZkNodeChangeNotificationListener keeps
them: whoever changes an entity's znode creates, in the same transaction, a sequential znode
<folder>/<prefix>NNNNNNNNNN naming what changed (/config/changes/config_change_,
/kafka-acl-changes/acl_changes_, /kafka-acl-extended-changes/acl_changes_); every broker watches
the folder, handles each notice numbered above the last one it handled, and deletes the notices
older than Kafka's change expiration (15 minutes), so that the folder does not grow for ever.

It takes the ZooKeeper client duck-typed (kazoo), so the stores above it (quotas, ACLs) hand it
the client they hold.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TypeVar

from logcore.cluster.znode_paths import CONFIG_CHANGE_NAME, CONFIG_CHANGES
from logcore.errors import ZkVersionConflictError

logger = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60_000      # Kafka's ZkNodeChangeNotificationListener default
ATTEMPTS = 50                           # conditional writes tried before giving up on a busy znode

V = TypeVar("V")


class Unchanged:
    """What a rewrite returns for "leave the znode as it is, announce nothing"."""


UNCHANGED = Unchanged()


def sequence_number(name: str) -> int:
    """The number of a sequential znode's name; -1 for a name of no such form."""
    try:
        return int(name.rpartition("_")[2])
    except ValueError:
        return -1


class ChangeNotices:
    """The notices of one folder (`client`: a started kazoo client)."""

    def __init__(self, client, folder: str, prefix: str, expiration_ms: int = CHANGE_EXPIRATION_MS):
        if expiration_ms < 0:
            raise ValueError(f"change notice expiration must be >= 0 ms, not {expiration_ms}")
        self.client = client
        self.folder = folder
        self.prefix = prefix
        self.expiration_ms = expiration_ms
        self._handled = -1              # the highest notice number handled (or loaded) here
        self._lock = threading.Lock()

    def ensure(self) -> None:
        self.client.ensure_path(self.folder)

    # ------------------------------------------------------------------ writing
    def add(self, transaction, data: bytes) -> None:
        """Add the creation of a notice holding `data` to a kazoo transaction."""
        transaction.create(f"{self.folder}/{self.prefix}", data, sequence=True)

    def replace(self, path: str, rewrite: Callable[[bytes | None], tuple[V, bytes | None | Unchanged]],
                data: bytes) -> V:
        """Replace the znode at `path` and announce it with a notice holding `data`, in one
        transaction conditional on the version read (read again and retried when another writer
        got in between). rewrite(current bytes, None when absent) gives (value, new bytes), the
        new bytes being None to delete the znode, UNCHANGED to write nothing; returns the value.
        An absent znode's parent is created first."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        for _ in range(ATTEMPTS):
            try:
                raw, stat = self.client.get(path)
                version = stat.version
            except NoNodeError:
                raw, version = None, None
            value, new = rewrite(raw)
            if new is UNCHANGED or (new is None and version is None):
                return value
            t = self.client.transaction()
            if version is None:
                self.client.ensure_path(path.rpartition("/")[0])
                t.create(path, new)
            elif new is None:
                t.delete(path, version=version)
            else:
                t.set_data(path, new, version=version)
            self.add(t, data)
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NodeExistsError, NoNodeError)):
                time.sleep(0.02)
                continue
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return value
        raise ZkVersionConflictError(f"{path}: too many concurrent changes")

    # ------------------------------------------------------------------ watching
    def mark_handled(self) -> None:
        """The notices there now count as handled: the caller loads what they announce next."""
        from kazoo.exceptions import NoNodeError
        try:
            children = self.client.get_children(self.folder)
        except NoNodeError:
            children = []
        with self._lock:
            self._handled = max((sequence_number(c) for c in children), default=-1)

    def watch(self, on_notice: Callable[[str, bytes | None], object]):
        """on_notice(name, data) for each notice numbered above the ones handled, in order, from
        now on (data None: the notice went before it could be read); then the expired notices
        are deleted. Returns kazoo's ChildrenWatch."""
        def on_children(children):
            self._notified(children, on_notice)
        return self.client.ChildrenWatch(self.folder, on_children)

    def _notified(self, children, on_notice) -> None:
        from kazoo.exceptions import NoNodeError
        numbered = sorted((sequence_number(c), c) for c in children)
        with self._lock:
            fresh = [(n, c) for n, c in numbered if n > self._handled]
            if fresh:
                self._handled = fresh[-1][0]
        for _, name in fresh:
            try:
                raw, _ = self.client.get(f"{self.folder}/{name}")
            except NoNodeError:
                raw = None
            on_notice(name, raw)
        self.purge(c for n, c in numbered if n >= 0)

    def purge(self, names) -> int:
        """Delete the notices of `names` older than the expiration; returns how many went."""
        from kazoo.exceptions import NoNodeError
        now_ms = time.time() * 1000
        gone = 0
        for name in names:
            path = f"{self.folder}/{name}"
            try:
                stat = self.client.exists(path)
                if stat is not None and now_ms - stat.ctime > self.expiration_ms:
                    self.client.delete(path)
                    gone += 1
            except NoNodeError:
                continue        # another broker purged it first
        return gone


def config_changes(client, expiration_ms: int = CHANGE_EXPIRATION_MS) -> ChangeNotices:
    """/config/changes/config_change_N: a topic's, broker's, user's or client's configs changed
    ({"version":2,"entity_path":"topics/<t>"}, as Kafka's AdminZkClient writes them)."""
    return ChangeNotices(client, CONFIG_CHANGES, CONFIG_CHANGE_NAME, expiration_ms)
