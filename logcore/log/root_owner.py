"""Who owns a log root: the claim of a process that serves it (a `seglog broker`).

A root served by a running broker is written only through that broker (docs/engine.md, "One
owner per root"). The broker advertises that it serves the root with a claim in the root:

  seglog-owner.json    JSON {"kind": "broker", "address": "PLAINTEXT://host:port",
                       "bootstrap": "host:port", "node_id", "pid", "host", "owner_id",
                       "started_ms", "heartbeat_ms", "lease_ms"}
  .seglog-owner.lock   local roots only: the owner holds an exclusive flock on it for as long
                       as it lives (the kernel drops it when the process dies, SIGKILL too)

Whether a claim is live:
  - local root: the lock file is locked by someone (a momentary non-blocking flock fails);
    a claim whose lock is free is stale whatever its age (its owner died or closed);
  - object store (no locks): the owner rewrites the claim every lease_ms / 3 (`heartbeat_ms`);
    a claim whose last heartbeat is older than lease_ms is stale. A claim made on this machine
    (same host name and boot id) by a process id that no longer runs is stale at once.
A stale claim never blocks anyone: writers go ahead (with a warning naming it), and a broker
starting on the root replaces it. A live claim makes every other writer (LogRoot.log(writer=True),
topic deletion, `seglog produce`, `seglog maintain`, the Spark sink in path mode) fail with
RootServedError naming the broker's address and the option that writes through it.

Nothing here knows what a broker is beyond the address it gives: the claim is made by the
process that serves the root and checked by every other one.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass

from logcore.errors import RootServedError, SegLogError

logger = logging.getLogger(__name__)

OWNER_FILE = "seglog-owner.json"
OWNER_LOCK = ".seglog-owner.lock"
DEFAULT_LEASE_MS = 30_000


@dataclass(frozen=True)
class OwnerRecord:
    kind: str
    address: str                 # PLAINTEXT://host:port, what clients connect to
    bootstrap: str               # host:port, for bootstrap.servers / kafka.bootstrap.servers
    node_id: int
    pid: int
    host: str
    owner_id: str
    started_ms: int
    heartbeat_ms: int
    lease_ms: int = DEFAULT_LEASE_MS
    boot_id: str = ""            # the machine's boot id (Linux): pid checks only on the same boot

    def encode(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> "OwnerRecord | None":
        try:
            doc = json.loads(data)
            return cls(kind=str(doc["kind"]), address=str(doc["address"]),
                       bootstrap=str(doc["bootstrap"]), node_id=int(doc.get("node_id", -1)),
                       pid=int(doc["pid"]), host=str(doc["host"]), owner_id=str(doc["owner_id"]),
                       started_ms=int(doc["started_ms"]), heartbeat_ms=int(doc["heartbeat_ms"]),
                       lease_ms=int(doc.get("lease_ms", DEFAULT_LEASE_MS)),
                       boot_id=str(doc.get("boot_id", "")))
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        return f"seglog {self.kind} {self.address} (pid {self.pid} on {self.host})"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_gone(record: OwnerRecord) -> bool:
    """The claim was made on this machine, since its last boot, by a process that no longer
    runs (two machines may share a host name; they never share a boot id)."""
    if (record.pid <= 0 or not record.boot_id or record.boot_id != _boot_id()
            or record.host != socket.gethostname()):
        return False
    try:
        os.kill(record.pid, 0)
    except OSError as exc:
        return exc.errno == errno.ESRCH
    return False


def _local_lock_held(storage) -> bool:
    """Someone holds the root's owner lock (local roots): a momentary non-blocking flock."""
    try:
        fd = os.open(storage.local_path(OWNER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_claim(storage) -> OwnerRecord | None:
    found = storage.read_versioned(OWNER_FILE)
    if found is None:
        return None
    record = OwnerRecord.decode(found[0])
    if record is None:
        logger.warning("%s is unreadable; ignoring it", storage.describe(OWNER_FILE))
    return record


def claim_is_live(storage, record: OwnerRecord, now_ms: int | None = None) -> bool:
    if _pid_gone(record):
        return False
    if storage.is_local:
        return _local_lock_held(storage)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return now_ms - record.heartbeat_ms <= record.lease_ms


def live_owner(storage) -> OwnerRecord | None:
    """The live claim on the root, or None (no claim, or a stale one: logged once per call)."""
    record = read_claim(storage)
    if record is None:
        return None
    if claim_is_live(storage, record):
        return record
    age = (int(time.time() * 1000) - record.heartbeat_ms) / 1000
    logger.warning("%s names %s, which no longer serves it (%s); ignoring the stale claim",
                   storage.describe(OWNER_FILE), record.describe(),
                   "its lock is free" if storage.is_local else f"last heartbeat {age:.0f} s ago")
    return None


def served_error(root_url: str, record: OwnerRecord, what: str, hint: str | None = None) -> RootServedError:
    """The refusal of `what` on a served root; `hint` says how to do it through the broker
    (`{bootstrap}` in it stands for the broker's host:port)."""
    if hint is not None:
        hint = hint.replace("{bootstrap}", record.bootstrap)
    else:
        hint = (f"write through it: Kafka clients with bootstrap.servers={record.bootstrap}, the Spark"
                f" sink with option kafka.bootstrap.servers={record.bootstrap}")
    return RootServedError(
        f"{what}: the log root {root_url} is served by {record.describe()}, and a root a broker"
        f" serves is written only through that broker; {hint} (or stop the broker first)", record)


class OwnerClaim:
    """The serving process's claim on a root: `acquire`, `heartbeat` (object stores), `release`."""

    def __init__(self, storage, *, kind: str, address: str, bootstrap: str, node_id: int,
                 lease_ms: int = DEFAULT_LEASE_MS):
        self.storage = storage
        self.owner_id = secrets.token_hex(8)
        now = int(time.time() * 1000)
        self.record = OwnerRecord(kind, address, bootstrap, node_id, os.getpid(), socket.gethostname(),
                                  self.owner_id, now, now, lease_ms, _boot_id())
        self._lock_fd: int | None = None
        self._version: str | None = None
        self._warned = False

    @property
    def heartbeat_interval_s(self) -> float:
        return self.record.lease_ms / 3000

    def acquire(self, wait_s: float = 2.0) -> None:
        """Claim the root, or raise RootServedError naming the live owner. A stale claim is replaced."""
        if self.storage.is_local:
            self.storage.makedirs("")
            fd = os.open(self.storage.local_path(OWNER_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    # a writer may be testing the lock for a moment; a live owner keeps it
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        other = read_claim(self.storage)
                        raise self._taken(other)
                    time.sleep(0.05)
            self._lock_fd = fd
            previous = read_claim(self.storage)
            if previous is not None:
                logger.warning("replacing the stale claim of %s on %s", previous.describe(), self.storage.url)
            self.storage.write_atomic(OWNER_FILE, self.record.encode())
            return
        for _ in range(20):
            found = self.storage.read_versioned(OWNER_FILE)
            if found is None:
                version = self.storage.put_if_absent(OWNER_FILE, self.record.encode())
            else:
                other = OwnerRecord.decode(found[0])
                if other is not None and claim_is_live(self.storage, other):
                    raise self._taken(other)
                if other is not None:
                    logger.warning("replacing the stale claim of %s on %s", other.describe(), self.storage.url)
                version = self.storage.put_if_version(OWNER_FILE, self.record.encode(), found[1])
            if version is not None:
                self._version = version
                return
        raise SegLogError(f"could not claim {self.storage.describe(OWNER_FILE)}: too many concurrent claims")

    def _taken(self, other: OwnerRecord | None) -> RootServedError:
        who = other.describe() if other is not None else "another process"
        return RootServedError(
            f"the log root {self.storage.url} is already served by {who}: one broker per root;"
            " stop that broker or give this one another log.dirs", other)

    def heartbeat(self) -> None:
        """Object stores: renew the claim (blocking; call every heartbeat_interval_s)."""
        if self.storage.is_local:
            return
        now = int(time.time() * 1000)
        record = OwnerRecord(**{**asdict(self.record), "heartbeat_ms": now})
        found = self.storage.read_versioned(OWNER_FILE)
        if found is not None and found[1] == self._version:
            version = self.storage.put_if_version(OWNER_FILE, record.encode(), found[1])
        else:
            other = OwnerRecord.decode(found[0]) if found is not None else None
            if not self._warned and (other is None or other.owner_id != self.owner_id):
                self._warned = True
                logger.warning("the claim on %s was replaced or removed by %s; claiming it again",
                               self.storage.url, other.describe() if other else "someone")
            version = self.storage.put_if_version(OWNER_FILE, record.encode(), found[1]) if found \
                else self.storage.put_if_absent(OWNER_FILE, record.encode())
        if version is not None:
            self.record, self._version = record, version

    def release(self) -> None:
        """Remove the claim (if still ours) and let the lock go."""
        try:
            found = self.storage.read_versioned(OWNER_FILE)
            if found is not None:
                other = OwnerRecord.decode(found[0])
                if other is not None and other.owner_id == self.owner_id:
                    self.storage.delete(OWNER_FILE)
        except Exception:     # noqa: BLE001 - a claim left behind is stale once we are gone
            logger.warning("could not remove %s", self.storage.describe(OWNER_FILE), exc_info=True)
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
