"""Jepsen-style runs against a seglog cluster: workload, nemesis, final read, checker.

    report = run_once(tmp_dir, Options(seed=7, duration=30))
    print(report.summary()); assert report.result.valid

Workload (clients in this process, talking to the brokers directly; faults are between the
servers only, as in Jepsen's Kafka tests):
- `producers` idempotent librdkafka producers (acks=all, enable.idempotence=true, max 5 in
  flight) sending unique integers to random partitions of one RF=3 topic (min.insync.replicas=2);
- `oneshot_producers` producers with acks=all, retries=0 and one request in flight: their single
  attempt's NOT_ENOUGH_REPLICAS is a definite failure (the broker refuses before appending), the
  only kind of `fail` the history records (aborted reads are checked against those). librdkafka
  still re-sends one of their requests on its own when the broker it was in flight to leaves the
  Metadata (it decommissions that broker and re-queues the request as "not persisted"), so their
  duplicates are counted, not failed;
- `consumers` consumers, each assigned every partition with assign + seek
  (auto.offset.reset=error), re-assigned now and then at an offset they had already read;
- `group_consumers` members of one consumer group (subscribe, rebalances as members leave and
  come back every 6-12 s, synchronous commits of what they read every 0.5-1.5 s); the group's
  committed offsets are read back at each assignment and once at the end, and the checker
  wants them never below the latest commit acknowledged before the read began;
- a HW watcher: ListOffsets(latest) per partition with its leader epoch, every 0.25 s;
- a metadata watcher: each partition's leader and ISR every 0.5 s, an event when they change
  (the report counts leader changes and ISR shrinks/expansions from them).
Outcomes (replication.md 6.3): `ok` = delivery report with an offset; `fail` = only the above;
everything else (timeouts, NOT_LEADER, disconnects, NOT_ENOUGH_REPLICAS after retries of an
idempotent producer) = `info`.

Nemesis: with `random.Random(seed)`, every `fault_gap` seconds one fault from `faults` is
started (schedule "random"; "cycle": each kind of `faults` in turn, `cycles` times, then the
workload stops), and healed after `fault_length` seconds (one fault at a time; the faults
marked ISR last at least replica.lag.time.max.ms + 1.5 s, what an ISR shrink takes, and those
aimed at the controller and zk-and-broker the session timeout + 1.5 s). Each fault is
three history events (f "nemesis", with its kind and number): "start" before it is applied,
"applied" with what it found and did (leaders before and after, the controller, bytes cut,
whether an old session was alive, ...), "heal" with what it found at the end; the report counts
what each did ("effects") and, per kind, the acknowledged sends while one was on and the
anomalies (of the examples kept) that came while or after one was on (see by_fault):
    kill             SIGKILL a partition leader, restart it at heal
    pause            SIGSTOP a partition leader, SIGCONT at heal
    isolate-node     a random broker cut from the brokers and ZooKeeper
    isolate-leader   a partition leader cut from the brokers and ZooKeeper
    leader-zk        a partition leader cut from ZooKeeper only
    leader-brokers   a partition leader cut from the other brokers only (not from ZooKeeper)
    bridge           a <-> b <-> c with a and c cut
    zk-leader        SIGKILL the ZooKeeper ensemble's leader, restart at heal (zookeepers=3)
    elect-preferred  a live leader moved under load: a partition's replicas reordered (Alter-
                     PartitionReassignments, same set) with an in-sync follower first, then
                     ElectLeaders PREFERRED; leader before and after recorded
    reassign         a live leader moved out of its replica set under load: a real reassignment
                     (AlterPartitionReassignments) replacing the leader by a broker outside the set
                     (RF < brokers), or shrinking the set to the other replicas (RF = brokers);
                     waited for (ListPartitionReassignments and Metadata), the original
                     assignment asked back at heal; replicas and leader before/asked/after and
                     whether each step completed recorded
    controlled-shutdown  SIGTERM a leader (controlled shutdown), restart at heal
    restart-leader   SIGKILL a leader, cut 1-64 KiB off the active segment of each of its
                     partitions (page cache lost; never below its last fsync, which the brokers'
                     fsync journal tells: fsync_journal.py), start it again at once, inside its
                     old ZooKeeper session (recorded whether the old registration was still there
                     when the new process started and when it listened)
    restart-follower the same on a follower of a partition, cutting only the partitions it follows
                     (both: not the tail of a partition whose ISR in ZooKeeper holds no other
                     broker; with min.insync.replicas=1 its page cache may be an acknowledged
                     record's only copy, which Kafka does not promise to keep)
    controller-kill  SIGKILL the controller (/controller in ZooKeeper), restart at heal
    controller-isolate  the controller cut from the brokers and ZooKeeper
    controller-zk-replies  another leader SIGKILLed while the controller's ZooKeeper replies are
                     lost from its first write to a state znode of a partition that leader led
                     (netproxy's zookeeper_write_to): the election it writes lands unseen, its
                     session lives; restart at heal; the state znodes before and at heal
                     recorded (a leadership is moved off the controller first if it led all)
    leader-zk-replies (ISR) a leader cut from the other brokers, its ZooKeeper replies lost from
                     its first write on: its ISR shrink lands and it never learns the outcome
                     (state znodes before and at heal recorded)
    zk-quorum-loss   SIGKILL 2 of the 3 ZooKeeper servers, restart at heal (zookeepers=3)
    zk-and-broker    SIGKILL a ZooKeeper server and a partition leader together (zookeepers=3)
    zk-slow          every broker <-> ZooKeeper link delayed 0.2-1 s each way
    slow-links (ISR) a leader's links to the other brokers delayed 1-4 s each way (ISR flaps)
    one-way (ISR)    what a leader sends to the other brokers held, or what they send to it;
                     the other direction flows
    alone-then-kill  a leader cut from the other brokers (not from ZooKeeper) until it has shrunk
                     its ISR to itself (the lag + 1.5 s; with min.insync.replicas=1 it acknowledges
                     alone meanwhile), then SIGKILLed and the links healed: no ISR member is left,
                     so its partitions stay offline, or with unclean.leader.election.enable a
                     follower outside the ISR leads (Kafka's documented loss); restart at heal
    lost-tail-all    power cut of the whole cluster: SIGKILL every broker, cut each segment back
                     to its last fsync (fsync_journal.py), restart at heal; only with fsync=True
                     (flush.messages=1 on the topic), where nothing acknowledged may be lost
    full-disk        a partition leader's filesystem filled to ENOSPC with a ballast file; its
                     next write fails and takes its only log dir offline, so the broker exits by
                     itself (status 1, KIP-112); heal deletes the ballast and restarts it
                     (recorded: the broker, the ballast's bytes, whether and when it exited and
                     its status, its log line, the produce errors seen meanwhile). Only
                     in runs whose faults include it is each broker's log.dirs on a tmpfs of its
                     own (FULL_DISK_SIZE; log.segment.bytes FULL_DISK_SEGMENT_BYTES, so that
                     segments roll while a disk is full); where mounting is refused (not root)
                     the fault is skipped with the reason recorded
Options also choose the topic's replication factor and min.insync.replicas, fsync,
auto.leader.rebalance.enable (every 2 s check), which moves leaders back by itself, and
unclean.leader.election.enable on the topic (`unclean`): the unclean elections the controllers
logged are added to the history (f "unclean-election") and the checker counts what they lose on
their partitions as expected, not as anomalies (checker.py, point 11).
At the end: workload stopped, every fault healed, dead processes restarted, then waited for
every partition to have a leader and a full ISR and the leader's HW (ListOffsets) to equal its
log end offset (read from its log.dirs), a final read of every partition from offset 0 to the
HW, the checker over history + final read, and the replica check over every broker's files. A
partition that is not caught up within 120 s is a `stuck-partition` anomaly (with its leader,
ISR, HW and each replica's log end offset); the checker still runs over the whole history, the
final read of that partition counting as incomplete.
"""
from __future__ import annotations

import bisect
import itertools
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from checker import Result, check, check_replicas, explain_duplicates, read_replica
from harness import Cluster, ClusterError, wait_until

TOPIC = "jepsen"
QUIET = {"log_level": 0}      # librdkafka's connection-refused lines: the history has the errors
ALL_FAULTS = ("kill", "pause", "isolate-node", "isolate-leader", "leader-zk", "leader-brokers", "bridge",
              "zk-leader", "elect-preferred", "reassign", "controlled-shutdown", "restart-leader",
              "restart-follower", "controller-kill", "controller-isolate", "controller-zk-replies",
              "leader-zk-replies",
              "zk-quorum-loss", "zk-and-broker", "zk-slow", "slow-links", "one-way", "alone-then-kill",
              "lost-tail-all",
              "full-disk")
NEW_FAULTS = ALL_FAULTS[ALL_FAULTS.index("elect-preferred"):]


@dataclass
class Options:
    seed: int = 1
    duration: float = 30.0            # seconds of workload under faults
    partitions: int = 3
    brokers: int = 3
    zookeepers: int = 1
    producers: int = 2
    oneshot_producers: int = 1
    consumers: int = 2
    group_consumers: int = 0          # members of one consumer group (subscribe, commits)
    rate: float = 40.0                # sends per second per producer
    faults: tuple = ("kill", "pause", "isolate-node", "isolate-leader", "leader-zk", "leader-brokers",
                     "bridge")
    fault_gap: tuple = (2.0, 5.0)     # seconds between a heal and the next fault
    fault_length: tuple = (3.0, 8.0)  # seconds a fault lasts
    schedule: str = "random"          # or "cycle": each kind of `faults` in turn
    cycles: int = 0                   # with "cycle": stop the workload after this many (0: duration)
    session_timeout_ms: int = 3000
    replication_factor: int = 3
    min_insync: int = 2
    fsync: bool = False               # flush.messages=1 on the topic, brokers under fsync_journal.py
    auto_rebalance: bool = False      # auto.leader.rebalance.enable, checked every 2 s
    unclean: bool = False             # unclean.leader.election.enable=true on the topic: the
                                      # checker counts what an unclean election (found in the
                                      # controllers' logs) loses as expected, on its partition
    broker_props: dict = field(default_factory=dict)
    client_debug: str = ""            # librdkafka `debug` contexts for the producers, logged to
                                      # <run dir>/client-<producer>.log (e.g. "msg,protocol,broker")


class History:
    """Thread-safe event log, kept in memory and appended to a JSONL file."""

    def __init__(self, path: Path):
        self.path = path
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._file = open(path, "w", encoding="utf-8")

    def add(self, **ev) -> dict:
        with self._lock:
            ev["t"] = time.monotonic_ns()
            self.events.append(ev)
            self._file.write(json.dumps(ev) + "\n")
        return ev

    def close(self) -> None:
        with self._lock:
            self._file.close()


# ---------------------------------------------------------------------- workload
class _Values:
    def __init__(self):
        self._it = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._it)


def _err_name(err) -> str:
    try:
        return err.name()
    except Exception:           # noqa: BLE001
        return str(err)


class ProducerWorker(threading.Thread):
    """One producer process of the history. `oneshot`: retries=0, idempotence off, one request
    in flight, so a NOT_ENOUGH_REPLICAS answer is a definite failure."""

    def __init__(self, name, cluster, history, values, opts: Options, stop: threading.Event, oneshot: bool):
        super().__init__(name=name, daemon=True)
        self.proc, self.cluster, self.h, self.values = name, cluster, history, values
        self.opts, self.stop, self.oneshot = opts, stop, oneshot
        self.rng = random.Random(f"{opts.seed}/{name}")
        self.pending: dict[int, int] = {}     # value -> key, not yet completed
        self.generation = 0
        self.error: BaseException | None = None

    def _producer(self):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": self.cluster.bootstrap, "acks": "all", "linger.ms": 5,
                "message.timeout.ms": 10000, "request.timeout.ms": 5000, "retry.backoff.ms": 100,
                "topic.metadata.refresh.interval.ms": 2000, "socket.connection.setup.timeout.ms": 3000,
                **QUIET}
        # confluent-kafka raises a fatal error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER after an
        # unclean election) out of poll() unless an error_cb takes it: taken here, the worker
        # starts a new producer as for a fatal delivery report
        conf["error_cb"] = self._on_error
        if self.oneshot:
            conf.update({"enable.idempotence": False, "retries": 0, "max.in.flight": 1})
        else:
            # Longer than any fault plus an election: when messages time out librdkafka drains,
            # bumps the producer epoch and re-sends what was in flight under the new epoch,
            # which duplicates records no broker can recognise (seen with 10 s: seed 102).
            conf.update({"enable.idempotence": True, "max.in.flight": 5, "message.timeout.ms": 60000})
        if self.opts.client_debug:
            import logging
            logger = logging.getLogger(f"jepsen.client.{self.proc}")
            if not logger.handlers:
                handler = logging.FileHandler(self.cluster.base / f"client-{self.proc}.log")
                handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
                logger.addHandler(handler)
                logger.setLevel(logging.DEBUG)
                logger.propagate = False
            conf.pop("log_level", None)
            conf.update({"debug": self.opts.client_debug, "logger": logger})
        return Producer(conf)

    def _poll(self, p, timeout: float) -> None:
        """p.poll, a fatal error it raises (confluent-kafka raises some, e.g. OUT_OF_ORDER_SEQUENCE_NUMBER
        after an unclean election, even with an error_cb) taken as a fatal delivery report."""
        from confluent_kafka import KafkaException
        try:
            p.poll(timeout)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is None or not err.fatal():
                raise
            self._on_error(err)

    def _on_error(self, err) -> None:
        if err.fatal():
            self.h.add(proc=f"{self.proc}.{self.generation}", type="info", f="client-error",
                       error=_err_name(err), message=err.str(), fatal=True)
            self._fatal = True

    def _delivery(self, proc):
        from confluent_kafka import KafkaError
        def cb(err, msg):
            v = int(msg.value())
            key = self.pending.pop(v, msg.partition())
            if err is None:
                self.h.add(proc=proc, type="ok", f="send", key=key, value=v, offset=msg.offset(),
                           leader_epoch=msg.leader_epoch())
            elif self.oneshot and err.code() == KafkaError.NOT_ENOUGH_REPLICAS:     # its single attempt
                self.h.add(proc=proc, type="fail", f="send", key=key, value=v, error=_err_name(err))
            else:
                self.h.add(proc=proc, type="info", f="send", key=key, value=v, error=_err_name(err),
                           fatal=bool(err.fatal()))
                if err.fatal():
                    self._fatal = True
        return cb

    def run(self):
        try:
            self._run()
        except BaseException as e:      # noqa: BLE001 - reported by the run
            self.error = e

    def _run(self):
        from confluent_kafka import KafkaException
        proc = f"{self.proc}.{self.generation}"
        p = self._producer()
        self._fatal = False
        cb = self._delivery(proc)
        interval = 1.0 / self.opts.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            if self._fatal:        # a fatal idempotence error: a new producer, a new process
                try:
                    p.purge()
                    p.flush(1)
                except KafkaException:      # a producer in a fatal state refuses these too
                    pass
                for v, key in list(self.pending.items()):      # no report will come: indeterminate
                    self.h.add(proc=proc, type="info", f="send", key=key, value=v, error="ABANDONED_AFTER_FATAL")
                self.pending.clear()
                self.generation += 1
                proc = f"{self.proc}.{self.generation}"
                p = self._producer()
                self._fatal = False
                cb = self._delivery(proc)
            if len(self.pending) > (1 if self.oneshot else 200):
                self._poll(p, 0.05)
                continue
            key = self.rng.randrange(self.opts.partitions)
            v = self.values.next()
            self.pending[v] = key
            self.h.add(proc=proc, type="invoke", f="send", key=key, value=v, idempotent=not self.oneshot)
            try:
                p.produce(TOPIC, value=str(v).encode(), partition=key, on_delivery=cb)
            except (BufferError, KafkaException) as e:
                self.pending.pop(v, None)
                self.h.add(proc=proc, type="fail", f="send", key=key, value=v, error=type(e).__name__,
                           message=str(e))
            self._poll(p, 0)
            next_at += interval
            if next_at < time.monotonic():
                next_at = time.monotonic()
            while not self.stop.is_set() and time.monotonic() < next_at and not self._fatal:
                self._poll(p, max(0.0, next_at - time.monotonic()))
        try:
            p.flush(15)
        except KafkaException:
            pass
        for v, key in list(self.pending.items()):
            self.h.add(proc=proc, type="info", f="send", key=key, value=v, error="UNFINISHED")
        self.pending.clear()


class ConsumerWorker(threading.Thread):
    def __init__(self, name, cluster, history, opts: Options, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.proc, self.cluster, self.h, self.opts, self.stop = name, cluster, history, opts, stop
        self.rng = random.Random(f"{opts.seed}/{name}")
        self.error: BaseException | None = None

    def run(self):
        try:
            self._run()
        except BaseException as e:      # noqa: BLE001
            self.error = e

    def _assign(self, c, positions):
        from confluent_kafka import TopicPartition
        c.assign([TopicPartition(TOPIC, p, o) for p, o in positions.items()])
        for p, o in positions.items():
            self.h.add(proc=self.proc, type="ok", f="assign", key=p, offset=o)

    def _run(self):
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": f"jepsen-{self.proc}",
                      "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100,
                      "topic.metadata.refresh.interval.ms": 2000, "socket.connection.setup.timeout.ms": 3000,
                      **QUIET})
        read = {p: 0 for p in range(self.opts.partitions)}     # next offset per partition
        self._assign(c, dict(read))
        reassign_at = time.monotonic() + self.rng.uniform(3, 8)
        try:
            while not self.stop.is_set():
                m = c.poll(0.2)
                if m is not None:
                    if m.error() is not None:
                        err = m.error()
                        self.h.add(proc=self.proc, type="fail", f="poll", key=m.partition(),
                                   error=_err_name(err), message=err.str())
                        if err.code() != KafkaError._PARTITION_EOF:
                            # position lost: start over from what we had read
                            self._assign(c, dict(read))
                    else:
                        p = m.partition()
                        _lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), cached=True)
                        self.h.add(proc=self.proc, type="ok", f="poll", key=p, offset=m.offset(),
                                   value=int(m.value()), hw=hi)
                        read[p] = m.offset() + 1
                if time.monotonic() >= reassign_at:
                    # seek back to an offset this consumer has read (at or below a known HW)
                    positions = {p: self.rng.randint(max(0, o - 50), o) for p, o in read.items()}
                    self._assign(c, positions)
                    read.update(positions)
                    reassign_at = time.monotonic() + self.rng.uniform(3, 8)
        finally:
            c.close()


GROUP = "jepsen-group"


class GroupConsumerWorker(threading.Thread):
    """A member of one consumer group (subscribe, rebalances, commits). It commits what it has
    read, synchronously, every 0.5-1.5 s, and now and then closes and starts a new consumer
    (a new process `gN.k` of the history, so a rebalance). Events: its polls (checked as the
    other consumers': contiguous within an assignment, which starts with an "assign" of offset
    -1, i.e. wherever the group's committed offset says), "commit" per partition (ok: the
    coordinator acknowledged it; fail/info otherwise), and "committed": the group's committed
    offset read back when a partition is assigned to it (`since`: when that read began)."""

    def __init__(self, name, cluster, history, opts: Options, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.proc, self.cluster, self.h, self.opts, self.stop = name, cluster, history, opts, stop
        self.rng = random.Random(f"{opts.seed}/{name}")
        self.generation = 0
        self.error: BaseException | None = None

    def run(self):
        try:
            while not self.stop.is_set():
                self._member(f"{self.proc}.{self.generation}", time.monotonic() + self.rng.uniform(6, 12))
                self.generation += 1
        except BaseException as e:      # noqa: BLE001
            self.error = e

    def _member(self, proc: str, until: float) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        h = self.h

        def on_assign(consumer, partitions):
            for tp in partitions:
                h.add(proc=proc, type="ok", f="assign", key=tp.partition, offset=-1, group=GROUP)
            since = time.monotonic_ns()
            try:
                got = consumer.committed(partitions, timeout=5)
            except KafkaException as e:
                h.add(proc=proc, type="fail", f="committed", key=None, error=_err_name(e.args[0]), group=GROUP)
                return
            for tp in got:
                if tp.error is None:
                    h.add(proc=proc, type="ok", f="committed", key=tp.partition, offset=tp.offset, since=since,
                          group=GROUP)

        def on_revoke(consumer, partitions):
            for tp in partitions:
                h.add(proc=proc, type="info", f="revoke", key=tp.partition, group=GROUP)

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 2000,
                      "socket.connection.setup.timeout.ms": 3000, **QUIET})
        c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        read: dict[int, int] = {}            # partition -> next offset, read since the last commit
        commit_at = time.monotonic() + self.rng.uniform(0.5, 1.5)
        try:
            while not self.stop.is_set() and time.monotonic() < until:
                m = c.poll(0.2)
                if m is not None:
                    if m.error() is not None:
                        err = m.error()
                        h.add(proc=proc, type="fail", f="poll", key=m.partition(), error=_err_name(err),
                              message=err.str())
                    else:
                        p = m.partition()
                        _lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), cached=True)
                        h.add(proc=proc, type="ok", f="poll", key=p, offset=m.offset(), value=int(m.value()), hw=hi)
                        read[p] = m.offset() + 1
                if read and time.monotonic() >= commit_at:
                    self._commit(c, proc, read)
                    read = {}
                    commit_at = time.monotonic() + self.rng.uniform(0.5, 1.5)
        finally:
            if read:
                self._commit(c, proc, read)
            c.close()

    def _commit(self, c, proc, read: dict) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        offsets = [TopicPartition(TOPIC, p, o) for p, o in sorted(read.items())]
        for tp in offsets:
            self.h.add(proc=proc, type="invoke", f="commit", key=tp.partition, offset=tp.offset, group=GROUP)
        try:
            done = c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            for tp in offsets:      # the coordinator may have written it: indeterminate
                self.h.add(proc=proc, type="info", f="commit", key=tp.partition, offset=tp.offset,
                           error=_err_name(e.args[0]), group=GROUP)
            return
        for tp in done or offsets:
            if tp.error is None:
                self.h.add(proc=proc, type="ok", f="commit", key=tp.partition, offset=tp.offset, group=GROUP)
            else:
                self.h.add(proc=proc, type="info", f="commit", key=tp.partition, offset=tp.offset,
                           error=_err_name(tp.error), group=GROUP)


def read_group_offsets(c: Cluster, h: History, partitions: int) -> None:
    """The group's committed offsets once every fault is healed (f "committed", proc "final")."""
    from confluent_kafka import Consumer, TopicPartition
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
    since = time.monotonic_ns()
    try:
        got = cons.committed([TopicPartition(TOPIC, p) for p in range(partitions)], timeout=30)
        for tp in got:
            if tp.error is None:
                h.add(proc="final", type="ok", f="committed", key=tp.partition, offset=tp.offset, since=since,
                      group=GROUP)
            else:
                h.add(proc="final", type="fail", f="committed", key=tp.partition, error=_err_name(tp.error),
                      group=GROUP)
    finally:
        cons.close()


class HwWatcher(threading.Thread):
    def __init__(self, cluster, history, opts: Options, stop: threading.Event):
        super().__init__(name="hw", daemon=True)
        self.cluster, self.h, self.opts, self.stop = cluster, history, opts, stop
        self.error: BaseException | None = None

    def run(self):
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec
        try:
            admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap,
                                 "socket.connection.setup.timeout.ms": 3000, **QUIET})
            while not self.stop.wait(0.25):
                futs = admin.list_offsets({TopicPartition(TOPIC, p): OffsetSpec.latest()
                                           for p in range(self.opts.partitions)}, request_timeout=2)
                for tp, fut in futs.items():
                    try:
                        info = fut.result(3)
                    except Exception as e:      # noqa: BLE001 - leaders move
                        self.h.add(proc="hw", type="fail", f="hw", key=tp.partition, error=type(e).__name__)
                        continue
                    self.h.add(proc="hw", type="ok", f="hw", key=tp.partition, offset=info.offset,
                               leader_epoch=info.leader_epoch if info.leader_epoch is not None else -1)
        except BaseException as e:      # noqa: BLE001
            self.error = e


# ---------------------------------------------------------------------- nemesis
def _lag_s(opts: "Options") -> float:
    """The brokers' replica.lag.time.max.ms in seconds (the harness sets 2 x the session)."""
    return float(opts.broker_props.get("replica.lag.time.max.ms", 2 * opts.session_timeout_ms)) / 1000.0


# Faults whose effect (an ISR shrink) needs the data plane broken for longer than the lag time:
# they last at least that plus 1.5 s, whatever fault_length says.
ISR_FAULTS = ("slow-links", "one-way", "leader-zk-replies")
# Faults whose effect (a session expiry, a new controller, an election) needs more than the
# ZooKeeper session timeout: at least that plus 1.5 s.
SESSION_FAULTS = ("controller-kill", "controller-isolate", "controller-zk-replies", "zk-and-broker",
                  "alone-then-kill")
NEEDS_JOURNAL = ("restart-leader", "restart-follower", "lost-tail-all")
NEEDS_ENSEMBLE = ("zk-leader", "zk-quorum-loss", "zk-and-broker")
FULL_DISK_SIZE = 256 << 20          # each broker's tmpfs with full-disk (a 60 s run writes a few MB)
FULL_DISK_SEGMENT_BYTES = 64 << 10  # small segments: rolls (new files, snapshots) on a full disk too
NEEDS_FSYNC = ("lost-tail-all",)


class Nemesis(threading.Thread):
    def __init__(self, cluster: Cluster, history: History, opts: Options, stop: threading.Event):
        super().__init__(name="nemesis", daemon=True)
        self.c, self.h, self.opts, self.stop = cluster, history, opts, stop
        self.rng = random.Random(opts.seed)
        self.faults: Counter = Counter()
        self.effects: Counter = Counter()      # "kind: what it did" -> count (see each fault)
        self.skipped: Counter = Counter()      # kind -> faults that found nothing to do
        self.error: BaseException | None = None
        faults = [f for f in opts.faults if f in ALL_FAULTS]
        unknown = set(opts.faults) - set(ALL_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)} (known: {', '.join(ALL_FAULTS)})")
        if cluster.zk is None or len(cluster.zk.nodes) < 3:
            faults = [f for f in faults if f not in NEEDS_ENSEMBLE]
        if not opts.fsync:
            faults = [f for f in faults if f not in NEEDS_FSYNC]
        self.choices = faults

    # -------------------------------------------------------------- cluster state
    def _describe(self) -> dict:
        """Metadata of the topic; asked again (3 times at most) while it names no leader or
        ISR for some partition (a broker that just started answers so until it knows)."""
        d = {}
        for attempt in range(3):
            try:
                d = self.c.describe(TOPIC)
            except Exception:           # noqa: BLE001 - leaders moving, a broker down
                d = {}
            if d and all(st["leader"] != -1 and st["isr"] for st in d.values()):
                return d
            time.sleep(0.1)
        return d

    def _leaders(self) -> dict:
        return {p: st["leader"] for p, st in sorted(self._describe().items())}

    def _live(self) -> list:
        return [i for i, n in self.c.nodes.items() if n.alive() and not n.paused]

    def _leader(self) -> int:
        """The leader of a random partition (a random live broker when none is known)."""
        p = self.rng.randrange(self.opts.partitions)
        leader = -1
        for _ in range(3):          # a broker that just started may not know the leaders yet
            leader = self._describe().get(p, {}).get("leader", -1)
            if leader in self.c.nodes:
                break
            time.sleep(0.1)
        if leader not in self.c.nodes or not self.c.nodes[leader].alive():
            live = [i for i, n in self.c.nodes.items() if n.alive()]
            leader = self.rng.choice(live or list(self.c.nodes))
        return leader

    def _controller(self) -> int:
        """The broker in /controller (a random live broker when none is)."""
        try:
            ctl = self.c.controller()
        except Exception:           # noqa: BLE001
            ctl = None
        if ctl not in self.c.nodes or not self.c.nodes[ctl].alive():
            ctl = self.rng.choice(self._live() or list(self.c.nodes))
        return ctl

    def _effect(self, kind: str, what: str) -> None:
        self.effects[f"{kind}: {what}"] += 1

    # -------------------------------------------------------------- faults
    def start_fault(self, kind: str):
        """Apply one fault; returns (what it did, the heal function, details for the history).
        The heal function returns details too (the state it found before healing) or None."""
        c = self.c
        if kind == "kill":
            b = self._leader()
            c.kill(b)
            return f"kill {b}", lambda: c.restart(b), {"broker": b}
        if kind == "pause":
            b = self._leader()
            c.pause(b)
            return f"pause {b}", lambda: c.resume(b), {"broker": b}
        if kind == "isolate-node":
            b = self.rng.choice(sorted(c.nodes))
            c.isolate(b)
            return f"isolate {b}", c.heal, {"broker": b}
        if kind == "isolate-leader":
            b = self._leader()
            c.isolate(b)
            return f"isolate leader {b}", c.heal, {"broker": b}
        if kind == "leader-zk":
            b = self._leader()
            c.cut_zookeeper(b)
            return f"cut leader {b} from zookeeper", c.heal, {"broker": b}
        if kind == "leader-brokers":
            b = self._leader()
            c.isolate_from_brokers(b)
            return f"cut leader {b} from brokers", c.heal, {"broker": b}
        if kind == "bridge":
            a, b, x = self.rng.sample(sorted(c.nodes), 3)
            c.bridge(a, b, x)
            return f"bridge {a}<->{b}<->{x}", c.heal, {"brokers": [a, b, x]}
        if kind == "zk-leader":
            node = c.kill_zookeeper_leader()
            return f"kill zookeeper leader {node.myid}", lambda: c.restart_zookeeper(node), {"zookeeper": node.myid}
        method = getattr(self, "_" + kind.replace("-", "_"), None)
        if method is None:
            raise ValueError(kind)
        return method(kind)

    def _find_partition(self, pick):
        """The first partition, in a random order, for which pick(partition, Metadata state,
        live brokers) is not None: (partition, state, what pick returned). Retries for up to
        10 s (after a fault the ISRs may take a moment to fill); None if none qualifies."""
        order = list(range(self.opts.partitions))
        self.rng.shuffle(order)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.stop.is_set():
            desc, live = self._describe(), set(self._live())
            for p in order:
                st = desc.get(p)
                if st is not None:
                    got = pick(p, st, live)
                    if got is not None:
                        return p, st, got
            time.sleep(0.3)
        return None

    def _move_leadership(self, candidates_of):
        """Reorder a partition's replicas (AlterPartitionReassignments, the same set) so that a
        broker from candidates_of(partition, state, live brokers) comes first, then ElectLeaders
        PREFERRED. Tries the partitions in a random order, waiting up to 10 s for one with a
        candidate (after a fault the ISRs may take a moment to fill). Returns the details
        (partition, leader/replicas/ISR before and after, error codes), or None."""
        from logcore.tools.kafka_admin import KafkaAdmin

        def pick(p, st, live):
            if st["leader"] not in self.c.nodes:
                return None
            return [b for b in candidates_of(p, st, live) if b != st["leader"]] or None
        found = self._find_partition(pick)
        if found is None:
            return None
        p, st, candidates = found
        target = self.rng.choice(sorted(candidates))
        new_order = [target] + [b for b in st["replicas"] if b != target]
        detail = {"partition": p, "leader_before": st["leader"], "replicas_before": st["replicas"],
                  "isr_before": st["isr"], "replicas_asked": new_order, "target": target}
        errors = {}
        try:
            with KafkaAdmin(self.c.bootstrap, timeout_ms=8000) as admin:
                r = admin.alter_partition_reassignments({(TOPIC, p): new_order})
                errors["reassign"] = r.get((TOPIC, p), (None, None))[0]
                # The broker answering ElectLeaders checks its own view of the assignment:
                # wait until Metadata shows the new order, then ask (again while it says not needed).
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline and self._describe().get(p, {}).get("replicas") != new_order:
                    time.sleep(0.1)
                for _ in range(10):
                    code, _msg = admin.elect_leaders("preferred", [(TOPIC, p)]).get((TOPIC, p), (None, None))
                    errors["elect"] = code
                    if code != 84 or self._describe().get(p, {}).get("leader") == target:   # 84 ELECTION_NOT_NEEDED
                        break
                    time.sleep(0.3)
        except Exception as e:      # noqa: BLE001 - recorded; the run goes on
            errors["exception"] = repr(e)
        deadline = time.monotonic() + 5
        after = self._describe().get(p, {})
        while time.monotonic() < deadline and after.get("leader") != target:
            time.sleep(0.2)
            after = self._describe().get(p, {})
        detail.update(errors=errors, leader_after=after.get("leader"), replicas_after=after.get("replicas"),
                      isr_after=after.get("isr"))
        return detail

    def _elect_preferred(self, kind):
        """Move a live, ZooKeeper-connected leader under load to an in-sync follower (replicas
        reordered, then a preferred election). Records the leader before and after."""
        detail = self._move_leadership(lambda p, st, live: [b for b in st["isr"] if b in live])
        if detail is None:
            self.skipped[kind] += 1
            return "preferred election: no partition with an in-sync follower to move to", None, {}
        moved = detail["leader_after"] == detail["target"] and detail["target"] != detail["leader_before"]
        self._effect(kind, "leadership moved" if moved else "leadership not moved")
        return (f"preferred election {TOPIC}-{detail['partition']}: replicas {detail['replicas_before']} -> "
                f"{detail['replicas_asked']}, leader {detail['leader_before']} -> {detail['leader_after']}"), \
            None, detail

    def _reassignment_state(self, admin, p: int, target: list) -> dict:
        """Where a reassignment of partition p to `target` stands: Metadata's replicas, leader
        and ISR, whether ListPartitionReassignments still lists it, and `completed` (the
        replicas are `target`, all in the ISR, the leader one of them, none listed)."""
        st = self._describe().get(p, {})
        try:
            ongoing = (TOPIC, p) in admin.list_partition_reassignments([(TOPIC, p)])
        except Exception as e:      # noqa: BLE001 - a controller moving: asked again
            ongoing = repr(e)
        done = (ongoing is False and st.get("replicas") == list(target) and st.get("leader") in target
                and sorted(st.get("isr") or ()) == sorted(target))
        return {"replicas": st.get("replicas"), "leader": st.get("leader"), "isr": st.get("isr"),
                "listed": ongoing, "completed": done}

    def _reassign_to(self, p: int, target: list, wait: float) -> dict:
        """AlterPartitionReassignments of partition p to `target`, then up to `wait` seconds for
        it to complete. Returns the error code, the state found at the end and the seconds."""
        from logcore.tools.kafka_admin import KafkaAdmin
        out = {"asked": list(target)}
        t0 = time.monotonic()
        try:
            with KafkaAdmin(self.c.bootstrap, timeout_ms=8000) as admin:
                code, msg = admin.alter_partition_reassignments({(TOPIC, p): list(target)}).get((TOPIC, p),
                                                                                           (None, None))
                out["error"] = code
                if msg:
                    out["message"] = msg
                state = self._reassignment_state(admin, p, target)
                while not state["completed"] and time.monotonic() - t0 < wait:
                    time.sleep(0.3)
                    state = self._reassignment_state(admin, p, target)
                out.update(state)
        except Exception as e:      # noqa: BLE001 - recorded; the run goes on
            out.update(exception=repr(e), completed=False)
        out["seconds"] = round(time.monotonic() - t0, 2)
        return out

    def _reassign(self, kind):
        """A real reassignment under load that moves a live leader out of its partition's
        replica set (AlterPartitionReassignments, then waited for, up to 20 s): with a broker
        outside the set (RF < brokers) the leader is replaced by it (same size); with none
        (RF = brokers) the set shrinks to the other replicas. Heal: the original assignment
        asked back (and waited for, up to 30 s). Records the partition, replicas before / asked
        / after, leader before / after, ISR, error codes and whether each step completed."""
        def pick(_p, st, live):
            if st["leader"] not in live:
                return None
            spare = sorted(b for b in live if b not in st["replicas"])
            others = [b for b in st["isr"] if b != st["leader"] and b in live]
            return (spare,) if spare or others else None    # grow-by-replace, or shrink to in-sync followers
        found = self._find_partition(pick)
        if found is None:
            self.skipped[kind] += 1
            return "reassign: no partition with a live leader and somewhere to move it", None, {}
        p, st, (spare,) = found
        leader, original = st["leader"], list(st["replicas"])
        if spare:
            new = self.rng.choice(spare)
            target, how = [new if b == leader else b for b in original], "replace"
        else:
            target, how = [b for b in original if b != leader], "shrink"
        step = self._reassign_to(p, target, 20)
        moved = step.get("leader") not in (None, -1, leader)
        self._effect(kind, f"{how}: completed" if step.get("completed") else f"{how}: not completed in time")
        self._effect(kind, "leader moved out" if moved else "leader not moved")
        detail = {"partition": p, "how": how, "leader_before": leader, "replicas_before": original,
                  "isr_before": st["isr"], "replicas_asked": target, "leader_after": step.get("leader"),
                  "replicas_after": step.get("replicas"), "isr_after": step.get("isr"), "step": step}

        def heal():
            back = self._reassign_to(p, original, 30)
            self._effect(kind, "original assignment restored" if back.get("completed")
                         else "original assignment not restored in time")
            return {"partition": p, "restore": back}
        return (f"reassign {TOPIC}-{p} ({how}): replicas {original} -> {target}, leader {leader} -> "
                f"{step.get('leader')}, {'completed' if step.get('completed') else 'NOT completed'} in "
                f"{step['seconds']} s"), heal, detail

    def _controlled_shutdown(self, kind):
        """SIGTERM a leader (a controlled shutdown: the controller moves its leaderships first),
        restart it at heal. Records what it led, who leads after, its exit status and time."""
        b = self._leader()
        before = self._leaders()
        node = self.c.nodes[b]
        proc, t0 = node.proc, time.monotonic()
        self.c.stop_broker(b)
        took = time.monotonic() - t0
        after = self._leaders()
        led = [p for p, l in before.items() if l == b]
        moved = [p for p in led if after.get(p) not in (b, -1, None)]
        detail = {"broker": b, "led": led, "leaders_before": before, "leaders_after": after,
                  "exit_status": proc.returncode if proc else None, "seconds": round(took, 2)}
        self._effect(kind, f"{len(moved)}/{len(led)} leaderships moved")
        self._effect(kind, "clean exit" if proc is not None and proc.returncode == 0 else "unclean exit")
        return (f"controlled shutdown of {b} (led {led}, leaders after {after}, exit "
                f"{detail['exit_status']} in {took:.1f} s)"), lambda: self.c.restart(b), detail

    def _fast_restart(self, kind, b: int, partitions: list):
        """SIGKILL broker b, cut 1-64 KiB off the active segment of `partitions` (its page
        cache lost), start it again at once, while its old ZooKeeper session still holds its
        registration (recorded: the session owning /brokers/ids/<b> before the kill and when the
        new process started)."""
        c = self.c
        try:
            owner_before = c.registration(b)
        except Exception:           # noqa: BLE001
            owner_before = None
        states = self._zk_states()
        t0 = time.monotonic()
        c.kill(b)
        # Kafka keeps an acknowledged record while one in-sync replica keeps it: a replica that
        # is the only member of its partition's ISR (min.insync.replicas=1) may have acknowledged
        # records that are in its page cache alone, so its tail is not cut.
        cut, sole = {}, []
        for p in partitions:
            isr = states.get(str(p), {}).get("isr") or []
            if not [o for o in isr if o != b]:
                sole.append(p)
                continue
            sizes = c.lose_page_cache(b, TOPIC, p, self.rng.randint(1024, 65536))
            if sizes is not None:
                cut[p] = sizes
        c.nodes[b].start()
        started = time.monotonic() - t0
        try:
            owner_at_start = c.registration(b)
        except Exception:           # noqa: BLE001
            owner_at_start = None
        old_session_alive = owner_before is not None and owner_at_start == owner_before
        try:
            c.nodes[b].wait_listening()
        except ClusterError as e:
            self.h.add(proc="nemesis", type="info", f="nemesis-note", value=f"restart of {b}: {e}")
        listened = time.monotonic() - t0
        try:
            owner_at_listen = c.registration(b)
        except Exception:           # noqa: BLE001
            owner_at_listen = None
        alive_at_listen = owner_before is not None and owner_at_listen == owner_before
        detail = {"broker": b, "partitions_cut": {str(p): list(v) for p, v in cut.items()},
                  "not_cut_sole_isr_member": sole,
                  "seconds_to_start": round(started, 3), "old_session": owner_before,
                  "session_at_start": owner_at_start, "old_session_alive_at_start": old_session_alive,
                  "seconds_to_listen": round(listened, 3), "session_at_listen": owner_at_listen,
                  "old_session_alive_at_listen": alive_at_listen}
        self._effect(kind, "restarted inside the old session" if old_session_alive
                     else "restarted after the old session ended")
        if alive_at_listen:
            self._effect(kind, "listening while the old session was alive")
        self._effect(kind, f"{sum(1 for v in cut.values() if v[1] < v[0])} of {len(cut)} segment tails cut")
        return (f"kill {b}, cut {sum(v[0] - v[1] for v in cut.values())} bytes off partitions {sorted(cut)}, "
                f"restart after {started:.2f} s (old session {'alive' if old_session_alive else 'gone'})"), \
            None, detail

    def _restart_leader(self, kind):
        b = self._leader()
        return self._fast_restart(kind, b, list(range(self.opts.partitions)))

    def _restart_follower(self, kind):
        """The follower variant: a follower of a random partition, only the partitions it
        follows lose their tails."""
        desc = self._describe()
        p = self.rng.randrange(self.opts.partitions)
        st = desc.get(p)
        followers = [b for b in (st["replicas"] if st else []) if b != st["leader"] and self.c.nodes[b].alive()] \
            if st else []
        if not followers:
            self.skipped[kind] += 1
            return f"restart follower of {TOPIC}-{p}: none is known", None, {}
        b = self.rng.choice(sorted(followers))
        followed = [q for q, s in desc.items() if b in s["replicas"] and s["leader"] != b]
        return self._fast_restart(kind, b, followed)

    def _controller_kill(self, kind):
        ctl = self._controller()
        self.c.kill(ctl)
        return f"kill controller {ctl}", self._controller_heal(kind, ctl, lambda: self.c.restart(ctl)), \
            {"controller": ctl}

    def _controller_isolate(self, kind):
        ctl = self._controller()
        self.c.isolate(ctl)
        return f"isolate controller {ctl}", self._controller_heal(kind, ctl, self.c.heal), {"controller": ctl}

    def _controller_heal(self, kind, ctl: int, undo):
        """The heal of a fault aimed at controller `ctl`: record whether the controller moved,
        then `undo` the fault."""
        def heal():
            try:
                now = self.c.controller()
            except Exception:       # noqa: BLE001
                now = None
            self._effect(kind, "controller moved" if now not in (None, ctl) else "controller did not move")
            undo()
            return {"controller_at_heal": now}
        return heal

    def _zk_states(self) -> dict:
        try:
            return {str(p): {"leader": st.get("leader"), "leader_epoch": st.get("leader_epoch"), "isr": st.get("isr")}
                    for p, st in sorted(self.c.partition_states(TOPIC).items())}
        except Exception:           # noqa: BLE001
            return {}

    def _controller_zk_replies(self, kind):
        """A leader that is not the controller SIGKILLed while the controller's ZooKeeper
        replies are lost from its first write to a state znode of a partition the killed broker
        led (reads, pings, notifications and other writes pass until then): the election it
        writes lands, it never hears back, nor anything after.
        Its requests and pings still arrive, so its session lives. Records the state znodes
        before and at heal."""
        ctl = self._controller()
        leaders = self._leaders()
        victims = sorted({b for b in leaders.values() if b in self.c.nodes and b != ctl and self.c.nodes[b].alive()})
        moved = None
        if not victims:
            # the controller leads every partition: first move one leadership to another broker
            # (a preferred election), so that killing that broker asks for an election
            moved = self._move_leadership(lambda p, st, live: [b for b in st["isr"] if b != ctl and b in live])
            leaders = self._leaders()
            victims = sorted({b for b in leaders.values() if b in self.c.nodes and b != ctl
                              and self.c.nodes[b].alive()}) or [b for b in self._live() if b != ctl]
        victim = self.rng.choice(victims) if victims else None
        before = self._zk_states()
        from netproxy import zookeeper_write_to
        # armed by a write to a state znode of a partition the victim leads: the controller's
        # election (the controller's own ISR shrinks as a leader do not count)
        led = [p for p, b in leaders.items() if b == victim]
        self.c.drop_zookeeper_replies(ctl, after_write=zookeeper_write_to(
            [f"/brokers/topics/{TOPIC}/partitions/{p}/state" for p in led]) if led else True)
        if victim is not None:
            self.c.kill(victim)

        def heal():
            zk_now = self._zk_states()
            try:
                ctl_now = self.c.controller()
            except Exception:       # noqa: BLE001
                ctl_now = None
            changed = [p for p, st in zk_now.items() if before.get(p, {}).get("leader") == victim
                       and st["leader"] != victim]
            self._effect(kind, f"{len(changed)} elections away from the killed broker written"
                         if changed else "no election written")
            self.c.heal()
            if victim is not None:
                self.c.restart(victim)
            return {"zk_states_at_heal": zk_now, "controller_at_heal": ctl_now}
        return (f"controller {ctl}'s zookeeper replies lost, leader {victim} killed"), heal, \
            {"controller": ctl, "killed": victim, "leaders_before": leaders, "zk_states_before": before,
             "leadership_moved_first": moved}

    def _leader_zk_replies(self, kind):
        """A leader cut from the other brokers, its ZooKeeper replies lost from its first write
        on: when its replica lag runs out it shrinks the ISR with a write that lands and whose
        outcome it never learns (nor anything after). Records the state znodes before and at
        heal."""
        b = self._leader()
        before = self._zk_states()
        self.c.drop_zookeeper_replies(b, after_write=True)
        self.c.isolate_from_brokers(b)

        def heal():
            zk_now = self._zk_states()
            shrunk = [p for p, st in zk_now.items() if st["leader"] == b
                      and len(st["isr"] or ()) < len(before.get(p, {}).get("isr") or ())]
            self._effect(kind, "ISR shrink landed in ZooKeeper unseen" if shrunk else "no ISR change in ZooKeeper")
            self.c.heal()
            return {"zk_states_at_heal": zk_now}
        return f"leader {b} cut from the brokers, then its zookeeper replies lost", heal, \
            {"broker": b, "zk_states_before": before}

    def _zk_quorum_loss(self, kind):
        nodes = self.rng.sample(self.c.zk.nodes, 2)
        for n in nodes:
            n.kill()
        return (f"kill zookeeper {[n.myid for n in nodes]} (quorum lost)",
                lambda: self.c.restart_zookeepers(nodes), {"zookeepers": [n.myid for n in nodes]})

    def _zk_and_broker(self, kind):
        z = self.rng.choice(self.c.zk.nodes)
        b = self._leader()
        z.kill()
        self.c.kill(b)

        def heal():
            self.c.restart_zookeeper(z)
            self.c.restart(b)
        return f"kill zookeeper {z.myid} and leader {b}", heal, {"zookeeper": z.myid, "broker": b}

    def _zk_slow(self, kind):
        d = round(self.rng.uniform(0.2, 1.0), 2)
        self.c.delay_zookeeper(d)
        return f"every broker's zookeeper links slowed by {d} s", self.c.heal, {"delay": d}

    def _isr_heal(self, kind, b, before):
        def heal():
            now = self._describe()
            shrunk = [p for p, st in now.items() if len(st["isr"]) < len(before.get(p, st)["isr"])]
            self._effect(kind, "ISR shrank" if shrunk else "ISR unchanged at heal")
            self.c.heal()
            return {"state_at_heal": {str(p): st for p, st in now.items()}}
        return heal

    def _slow_links(self, kind):
        b = self._leader()
        before = self._describe()
        d = round(self.rng.uniform(1.0, 4.0), 2)
        self.c.delay_links(b, d)
        return f"leader {b}'s links to the brokers slowed by {d} s", self._isr_heal(kind, b, before), \
            {"broker": b, "delay": d, "state_before": {str(p): st for p, st in before.items()}}

    def _one_way(self, kind):
        b = self._leader()
        before = self._describe()
        others = [o for o in sorted(self.c.nodes) if o != b]
        outgoing = self.rng.random() < 0.5
        for o in others:
            if outgoing:
                self.c.one_way(b, o)
            else:
                self.c.one_way(o, b)
        what = (f"leader {b}'s packets to {others} held (one way)" if outgoing
                else f"packets from {others} to leader {b} held (one way)")
        return what, self._isr_heal(kind, b, before), \
            {"broker": b, "outgoing": outgoing, "state_before": {str(p): st for p, st in before.items()}}

    def _alone_then_kill(self, kind):
        """A leader left alone in its ISR, then killed (see the module docstring). Records the
        state znodes when it was killed and at heal (who leads, at which epoch, which ISR)."""
        b = self._leader()
        self.c.isolate_from_brokers(b)
        self.stop.wait(_lag_s(self.opts) + 1.5)
        before = self._zk_states()
        alone = sorted(int(p) for p, st in before.items() if st["leader"] == b and st["isr"] == [b])
        self.c.kill(b)
        self.c.heal()
        self._effect(kind, f"{len(alone)} partitions left with the leader alone in the ISR" if alone
                     else "no ISR shrank to the leader alone")

        def heal():
            now = self._zk_states()
            moved = [p for p in alone if now.get(str(p), {}).get("leader") not in (b, -1, None)]
            self._effect(kind, f"{len(moved)} of them led by a broker outside the ISR" if moved
                         else "none led by another broker (offline)" if alone else "nothing to elect")
            self.c.restart(b)
            return {"zk_states_at_heal": now, "elected_outside_isr": moved}
        return (f"leader {b} cut from the brokers until alone in the ISR of {alone}, then killed"), heal, \
            {"broker": b, "alone_in_isr": alone, "zk_states_at_kill": before}

    def _lost_tail_all(self, kind):
        """A power cut of the whole cluster: SIGKILL every broker at once and cut each segment of
        the topic back to its last fsync (fsync_journal.py); restart them all at heal. With
        flush.messages=1 nothing acknowledged may be lost."""
        ids = sorted(self.c.nodes)
        for b in ids:
            self.c.nodes[b].signal(9)
        cut = {}
        for b in ids:
            self.c.kill(b)
            cut[b] = self.c.lose_unsynced(b, TOPIC)
        lost = sum(v[0] - v[1] for per in cut.values() for v in per.values())
        self._effect(kind, "unsynced bytes cut" if lost else "nothing unsynced to cut")

        def heal():
            self.c.start_dead()
        return (f"power cut: every broker killed, {lost} unsynced bytes cut"), heal, \
            {"cut": {str(b): v for b, v in cut.items()}, "bytes": lost}

    def _full_disk(self, kind):
        """Fill a partition leader's filesystem (its own tmpfs) to ENOSPC with a ballast file.
        Its next write fails, which takes its only log dir offline: the broker must log why and
        exit by itself (status 1, KIP-112), acknowledging nothing that failed; its leaderships
        move. A watcher records when it exited and with what status (also as a history event).
        Heal: the ballast deleted, the broker restarted if it exited (it recovers its log)."""
        c = self.c
        if not c.mounted:
            reason = c.disk_error or "the brokers have no filesystems of their own"
            self.skipped[kind] += 1
            return f"full disk: skipped ({reason})", None, {"skipped": reason}
        b = self._leader()
        node = c.nodes[b]
        proc = node.proc
        mark = node.log_path.stat().st_size if node.log_path.exists() else 0
        since = len(self.h.events)
        filled_at = time.time()
        ballast = c.fill_disk(b)
        detail = {"broker": b, "ballast_bytes": ballast, "disk": c.disk_usage(b), "led": [
            p for p, l in self._leaders().items() if l == b]}
        self._effect(kind, "disk filled")
        exited: dict = {}
        done = threading.Event()

        def watch():
            while not done.is_set():
                status = proc.poll() if proc is not None else None
                if status is not None:
                    exited.update(exit_status=status, exited_s_after_fill_began=round(time.time() - filled_at, 2))
                    self.h.add(proc="nemesis", type="info", f="nemesis-note", value=f"broker {b} exited",
                               broker=b, exit_status=status, kind=kind)
                    return
                done.wait(0.05)

        watcher = threading.Thread(target=watch, name=f"full-disk-watch-{b}", daemon=True)
        watcher.start()

        def heal():
            done.set()
            watcher.join(5)
            errors = Counter(ev.get("error") for ev in self.h.events[since:]
                             if ev.get("f") == "send" and ev.get("type") in ("fail", "info"))
            try:
                with open(node.log_path, "rb") as f:
                    f.seek(mark)
                    lines = f.read().decode(errors="replace").splitlines()
            except OSError:
                lines = []
            stop_line = next((ln for ln in lines if "Shutdown broker because all log dirs" in ln), None)
            freed = c.free_disk(b)
            self._effect(kind, "produce errors seen" if errors else "no produce errors seen")
            if exited:
                self._effect(kind, f"broker exited with status {exited['exit_status']}")
            else:
                self._effect(kind, "broker did not exit (wrote nothing while full?)")
            if stop_line:
                self._effect(kind, "broker logged the log dir failure")
            out = {"broker": b, "ballast_freed": freed, "produce_errors": dict(errors),
                   "exited": bool(exited), **exited, "stop_log_line": stop_line and stop_line[-300:]}
            if not node.alive():
                c.restart(b)        # it recovers its log (the write that failed left none of it)
                out["restarted"] = True
            return out
        return f"fill the disk of leader {b} ({ballast} bytes of ballast)", heal, detail

    # -------------------------------------------------------------- schedule
    def _length(self, kind: str) -> float:
        length = self.rng.uniform(*self.opts.fault_length)
        if kind in ISR_FAULTS:
            length = max(length, _lag_s(self.opts) + 1.5)
        if kind in SESSION_FAULTS:
            length = max(length, self.opts.session_timeout_ms / 1000.0 + 1.5)
        return length

    def _schedule(self):
        if self.opts.schedule == "cycle":
            n = 0
            while not self.opts.cycles or n < self.opts.cycles:
                yield from self.choices
                n += 1
        else:
            while True:
                yield self.rng.choice(self.choices)

    def run(self):
        try:
            kinds = self._schedule()
            while not self.stop.wait(self.rng.uniform(*self.opts.fault_gap)):
                kind = next(kinds, None)
                if kind is None:
                    break
                n = sum(self.faults.values())
                # "start" before the fault is applied (some take seconds: a controlled shutdown),
                # "applied" with what it did once it is, "heal" with what it found at the end
                self.h.add(proc="nemesis", type="info", f="nemesis", value=kind, phase="start", kind=kind, fault=n)
                what, heal, detail = self.start_fault(kind)
                self.faults[kind] += 1
                self.h.add(proc="nemesis", type="info", f="nemesis", value=what, phase="applied", kind=kind,
                           fault=n, detail=detail)
                self.stop.wait(self._length(kind))
                more = heal() if heal is not None else None
                self.h.add(proc="nemesis", type="info", f="nemesis", value=what, phase="heal", kind=kind,
                           fault=n, detail=more)
        except BaseException as e:      # noqa: BLE001
            self.error = e


class MetaWatcher(threading.Thread):
    """Every 0.5 s the partitions' leader and ISR from Metadata; a history event (f "meta") when
    they change, so a run can count leader moves and ISR shrinks/expansions."""

    def __init__(self, cluster, history, opts: Options, stop: threading.Event):
        super().__init__(name="meta", daemon=True)
        self.c, self.h, self.opts, self.stop = cluster, history, opts, stop
        self.error: BaseException | None = None

    def run(self):
        last = {}
        try:
            while not self.stop.wait(0.5):
                try:
                    d = self.c.describe(TOPIC, timeout=2)
                except Exception:       # noqa: BLE001
                    continue
                for p, st in sorted(d.items()):
                    if not st["isr"]:
                        continue        # a broker that does not know the partition (yet)
                    now = (st["leader"], tuple(sorted(st["isr"])))
                    if last.get(p) != now:
                        self.h.add(proc="meta", type="info", f="meta", key=p, leader=st["leader"],
                                   isr=sorted(st["isr"]), replicas=st["replicas"])
                        last[p] = now
        except BaseException as e:      # noqa: BLE001
            self.error = e


def meta_stats(history: list[dict]) -> dict:
    """Leader changes (and those to a broker outside the ISR last seen), ISR shrinks and
    expansions seen by the MetaWatcher."""
    last, out = {}, Counter()
    for ev in history:
        if ev.get("f") != "meta":
            continue
        k = ev["key"]
        if k in last:
            leader, isr = last[k]
            if ev["leader"] != leader:
                out["leader_changes"] += 1
                if ev["leader"] not in isr and ev["leader"] != -1:
                    # a hint only (sampled every 0.5 s, an expansion may be missed); the unclean
                    # elections counted by the checker are those the controllers logged
                    out["leader_outside_last_seen_isr"] += 1
            if len(ev["isr"]) < len(isr):
                out["isr_shrinks"] += 1
            elif len(ev["isr"]) > len(isr):
                out["isr_expansions"] += 1
        last[k] = (ev["leader"], ev["isr"])
    return dict(out)


def by_fault(history: list[dict], result: Result) -> dict:
    """Per fault kind: how many were started, acknowledged sends while one of that kind was on,
    and the anomalies (of the examples kept) attributed to the last fault started before their
    moment: for a record at a key and offset where another value was later seen, the first
    sighting of the other value (when the log was rewritten); else the anomaly's own event
    (lost: the acknowledgment). Examples with neither are not attributed."""
    out = {}
    spans = []          # (start index, heal index or None, kind)
    open_at = {}
    for i, ev in enumerate(history):
        if ev.get("f") != "nemesis" or "kind" not in ev:
            continue
        if ev.get("phase") == "start":
            open_at[ev.get("fault")] = len(spans)
            spans.append([i, None, ev["kind"]])
        elif ev.get("phase") == "heal" and ev.get("fault") in open_at:
            spans[open_at.pop(ev.get("fault"))][1] = i
    for _s, _h, kind in spans:
        out.setdefault(kind, {"faults": 0, "acked_during": 0, "anomalies_after": 0})["faults"] += 1
    starts = [s for s, _h, _k in spans]
    for s, h, kind in spans:
        hi = h if h is not None else len(history)
        out[kind]["acked_during"] += sum(1 for ev in history[s:hi] if ev.get("f") == "send" and ev.get("type") == "ok")
    seen = {}           # (key, offset) -> [(index, value)] from acknowledged sends and polls
    for i, ev in enumerate(history):
        if ev.get("f") in ("send", "poll") and ev.get("type") == "ok" and ev.get("offset") is not None:
            seen.setdefault((ev["key"], ev["offset"]), []).append((i, ev["value"]))
    for examples in result.anomalies.values():
        for ex in examples:
            i = ex.get("index")
            obs = seen.get((ex.get("key"), ex.get("offset")), [])
            # a record replaced by another: the fault on when the other value was first seen
            changed = next((j for j, v in obs if obs and v != obs[0][1]), None)
            if changed is not None:
                i = changed
            if i is None:
                continue
            j = bisect.bisect_right(starts, i) - 1
            if j >= 0:
                out[spans[j][2]]["anomalies_after"] += 1
    return out


# ---------------------------------------------------------------------- the end of a run
def heal_everything(c: Cluster, h: History) -> None:
    c.heal()
    c.free_disks()
    c.resume_all()
    if c.zk is not None:
        for z in c.zk.nodes:
            if not z.alive():
                c.restart_zookeeper(z)
    c.start_dead()
    h.add(proc="nemesis", type="info", f="nemesis", value="heal all", phase="heal")


def wait_caught_up(c: Cluster, partitions: int, timeout: float = 120) -> dict[int, int]:
    """Until every partition has a live leader, a full ISR, and the leader's HW (ListOffsets)
    equal to its log end offset on disk. Returns partition -> HW."""
    deadline = time.monotonic() + timeout

    def caught_up():
        try:
            d = c.describe(TOPIC)
            hws = c.end_offsets(TOPIC, range(partitions))
        except Exception:           # noqa: BLE001
            return None
        out = {}
        for p in range(partitions):
            st = d.get(p)
            if st is None or st["leader"] not in c.nodes or sorted(st["isr"]) != sorted(st["replicas"]):
                return None
            leo = read_replica(c.nodes[st["leader"]].log_dir, TOPIC, p)
            if leo is None or hws[p][0] != leo.log_end_offset:
                return None
            out[p] = hws[p][0]
        return out
    return wait_until(caught_up, max(1.0, deadline - time.monotonic()),
                      "full ISR and leader HW == log end offset on every partition", interval=0.5)


def stuck_partitions(c: Cluster, partitions: int) -> tuple[dict, dict]:
    """After wait_caught_up gave up: each partition's HW to read up to (0 when it has no
    leader) and, for those not caught up, why (leader, ISR, replicas, HW, every replica's log
    end offset read from its files)."""
    try:
        d = c.describe(TOPIC)
    except Exception:                   # noqa: BLE001
        d = {}
    ends = {}
    for p in range(partitions):         # one by one: a partition without a leader fails alone
        try:
            ends.update(c.end_offsets(TOPIC, [p]))
        except Exception:               # noqa: BLE001
            pass
    hws, stuck = {}, {}
    for p in range(partitions):
        st = d.get(p, {"leader": -1, "isr": [], "replicas": sorted(c.nodes)})
        hw = ends.get(p, (None, None))[0]
        leos = {}
        for b in st["replicas"]:
            r = read_replica(c.nodes[b].log_dir, TOPIC, p) if b in c.nodes else None
            leos[b] = r.log_end_offset if r else None
        ok = (st["leader"] in c.nodes and sorted(st["isr"]) == sorted(st["replicas"]) and hw is not None
              and hw == leos.get(st["leader"]))
        hws[p] = hw if hw is not None else 0
        if not ok or hw is None:
            stuck[p] = {"leader": st["leader"], "isr": st["isr"], "replicas": st["replicas"], "hw": hw,
                        "log_end_offsets": {str(b): v for b, v in leos.items()}}
    return hws, stuck


_UNCLEAN = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) WARNING \S+: controller (\d+): UNCLEAN leader "
                      r"election for " + re.escape(TOPIC) + r"-(\d+)( \(requested\))?: broker (\d+) \(not in ISR "
                      r"\[([\d, ]*)\]\)")


def unclean_elections(c: Cluster) -> list[dict]:
    """The unclean leader elections of the topic's partitions that the controllers logged (each
    broker's log, every start), as history events (f "unclean-election": key, leader, the ISR
    it was not in, the controller, the log line's wall-clock time). The controller logs one as
    it writes the new state; a write that then failed would still be listed."""
    out = []
    for b, node in sorted(c.nodes.items()):
        try:
            text = node.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = _UNCLEAN.match(line)
            if m is None:
                continue
            wall = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            out.append({"proc": "broker", "type": "info", "f": "unclean-election", "key": int(m.group(4)),
                        "leader": int(m.group(6)), "isr": [int(x) for x in m.group(7).split(",") if x.strip()],
                        "controller": int(m.group(3)), "requested": bool(m.group(5)), "log": node.log_path.name,
                        "wall": round(wall, 3)})
    return sorted(out, key=lambda ev: ev["wall"])


def final_read(c: Cluster, hws: dict[int, int], timeout: float = 60) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "jepsen-final", "enable.auto.commit": False,
                     "auto.offset.reset": "error", "fetch.wait.max.ms": 100, **QUIET})
    cons.assign([TopicPartition(TOPIC, p, 0) for p in hws])
    got = {p: [] for p in hws}
    errors = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(len(got[p]) < hws[p] for p in hws):
        m = cons.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(_err_name(m.error()))
            continue
        if m.offset() < hws[m.partition()]:
            got[m.partition()].append([m.offset(), int(m.value())])
    cons.close()
    final = {}
    for p, recs in got.items():
        recs.sort()
        complete = len(recs) == hws[p] and all(o == i for i, (o, _v) in enumerate(recs))
        if not complete:     # keep the contiguous prefix for the checker, mark it incomplete
            prefix = []
            for i, (o, v) in enumerate(recs):
                if o != i:
                    break
                prefix.append([o, v])
            recs = prefix
        final[p] = {"start": 0, "records": recs, "complete": complete, "errors": errors}
    return final


@dataclass
class RunReport:
    seed: int
    result: Result
    faults: Counter
    history_path: Path
    duration: float
    final_records: int
    errors: list
    effects: Counter = field(default_factory=Counter)    # "kind: what it did" -> count
    skipped: Counter = field(default_factory=Counter)    # kind -> faults that found nothing to do
    meta: dict = field(default_factory=dict)             # leader changes, ISR shrinks/expansions
    per_fault: dict = field(default_factory=dict)        # kind -> faults, acked_during, anomalies_after
    label: str = ""                                      # the configuration's name (bench)

    def summary(self) -> str:
        s = self.result.stats
        lines = [f"seed {self.seed}: {sum(self.faults.values())} faults {dict(self.faults)}, "
                 f"{s.get('sends_ok', 0)} acknowledged ({s.get('sends_ok_without_offset', 0)} without an offset) / "
                 f"{s.get('sends_invoked', 0)} sends "
                 f"({s.get('sends_fail', 0)} failed, {s.get('sends_info', 0)} indeterminate), "
                 f"{s.get('polled', 0)} polled, {self.final_records} records in the final read, "
                 f"{self.duration:.0f} s",
                 f"  liveness: {s.get('liveness')}; duplicates from the producers without idempotence: "
                 f"{s.get('duplicates_without_idempotence', 0)}",
                 f"  errors: {s.get('errors')}",
                 f"  seen in Metadata: {self.meta}"]
        if self.effects or self.skipped:
            lines.append(f"  nemesis effects: {dict(sorted(self.effects.items()))}"
                         + (f"; skipped: {dict(self.skipped)}" if self.skipped else ""))
        lines.append("  " + self.result.summary().replace("\n", "\n  "))
        if self.errors:
            lines.append(f"  harness errors: {self.errors}")
        return "\n".join(lines)


def run_once(base: Path, opts: Options, before_final=None) -> RunReport:
    """One run: a fresh cluster in `base`, workload + nemesis for opts.duration, the end phase
    and the checks. The cluster is stopped (by pid) whatever happens. `before_final(cluster)`,
    when given, runs after the workload stopped and before the cluster is healed and read (the
    tests use it to break things on purpose and see the checker notice)."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    props = dict(opts.broker_props)
    if opts.auto_rebalance:
        props.setdefault("auto.leader.rebalance.enable", "true")
        props.setdefault("leader.imbalance.check.interval.seconds", 2)
    journal = opts.fsync or any(f in NEEDS_JOURNAL for f in opts.faults)
    disk = FULL_DISK_SIZE if "full-disk" in opts.faults else None
    if disk:
        props.setdefault("log.segment.bytes", FULL_DISK_SEGMENT_BYTES)
    c = Cluster(base, brokers=opts.brokers, zookeepers=opts.zookeepers,
                session_timeout_ms=opts.session_timeout_ms, props=props, fsync_journal=journal,
                disk_size=disk)
    h = History(base / "history.jsonl")
    ok = False
    try:
        c.start()
        rf = min(opts.replication_factor, opts.brokers)
        topic_config = {"min.insync.replicas": min(opts.min_insync, rf)}
        if opts.fsync:
            topic_config["flush.messages"] = 1
        if opts.unclean:
            topic_config["unclean.leader.election.enable"] = "true"
        c.create_topic(TOPIC, opts.partitions, rf, topic_config)
        c.wait_healthy(TOPIC, opts.partitions)
        stop, stop_nemesis = threading.Event(), threading.Event()
        values = _Values()
        workers = [ProducerWorker(f"p{i}", c, h, values, opts, stop, oneshot=False) for i in range(opts.producers)]
        workers += [ProducerWorker(f"q{i}", c, h, values, opts, stop, oneshot=True)
                    for i in range(opts.oneshot_producers)]
        workers += [ConsumerWorker(f"c{i}", c, h, opts, stop) for i in range(opts.consumers)]
        workers += [GroupConsumerWorker(f"g{i}", c, h, opts, stop) for i in range(opts.group_consumers)]
        workers.append(HwWatcher(c, h, opts, stop))
        if c.clustered:
            workers.append(MetaWatcher(c, h, opts, stop))
        nemesis = Nemesis(c, h, opts, stop_nemesis)
        for w in workers:
            w.start()
        nemesis.start()
        if opts.schedule == "cycle" and opts.cycles:
            nemesis.join(opts.duration)         # the cycles done, or the duration as a cap
        else:
            time.sleep(opts.duration)
        stop_nemesis.set()
        nemesis.join(60)
        heal_everything(c, h)
        time.sleep(2)                  # let the workload see a healed cluster for a moment
        stop.set()
        for w in workers:
            w.join(60)
        if before_final is not None:
            before_final(c)
            heal_everything(c, h)
        errors = [f"{w.name}: {w.error!r}" for w in workers + [nemesis] if w.error is not None]
        errors += [f"{w.name}: still running" for w in workers + [nemesis] if w.is_alive()]
        stuck = {}
        try:
            hws = wait_caught_up(c, opts.partitions)
        except ClusterError:
            # A partition that never gets a leader with a full ISR and HW == log end is an
            # anomaly of its own; the checker still runs over the whole history, with the
            # final read of the others complete and of the stuck ones marked incomplete.
            hws, stuck = stuck_partitions(c, opts.partitions)
        final = final_read(c, hws, timeout=60 if not stuck else 20)
        for p in stuck:
            final[p]["complete"] = False
        if opts.group_consumers:
            try:
                read_group_offsets(c, h, opts.partitions)
            except Exception as e:      # noqa: BLE001 - reported with the run
                errors.append(f"reading the group's offsets: {e!r}")
        for ev in unclean_elections(c):
            h.add(**ev)
        h.close()
        res = check(h.events, final, allowed_loss=opts.unclean)
        for p, why in sorted(stuck.items()):
            res.add("stuck-partition", key=p, **why)
        try:
            assignment = c.describe(TOPIC)
        except Exception:               # noqa: BLE001
            assignment = {}
        healthy = {p: hw for p, hw in hws.items() if p not in stuck and p in assignment}
        replicas = {p: {b: read_replica(c.nodes[b].log_dir, TOPIC, p) for b in assignment[p]["replicas"]}
                    for p in healthy}
        res.merge(check_replicas(replicas, healthy))
        explain_duplicates(res, lambda key: c.nodes[assignment[key]["leader"]].log_dir
                           if assignment.get(key, {}).get("leader") in c.nodes else
                           c.nodes[min(c.nodes)].log_dir, TOPIC)
        (base / "final.json").write_text(json.dumps(final))
        report = RunReport(opts.seed, res, nemesis.faults, h.path, time.monotonic() - t0,
                           sum(len(f["records"]) for f in final.values()), errors, effects=nemesis.effects,
                           skipped=nemesis.skipped, meta=meta_stats(h.events), per_fault=by_fault(h.events, res))
        ok = res.valid and not errors
        return report
    finally:
        h.close()
        c.stop(print_logs=not ok)
