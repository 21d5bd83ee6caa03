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
- a HW watcher: ListOffsets(latest) per partition with its leader epoch, every 0.25 s.
Outcomes (replication.md 6.3): `ok` = delivery report with an offset; `fail` = only the above;
everything else (timeouts, NOT_LEADER, disconnects, NOT_ENOUGH_REPLICAS after retries of an
idempotent producer) = `info`.

Nemesis: with `random.Random(seed)`, every `fault_gap` seconds one fault from `faults` is
started, and healed after `fault_length` seconds (one fault at a time):
    kill             SIGKILL a partition leader, restart it at heal
    pause            SIGSTOP a partition leader, SIGCONT at heal
    isolate-node     a random broker cut from the brokers and ZooKeeper
    isolate-leader   a partition leader cut from the brokers and ZooKeeper
    leader-zk        a partition leader cut from ZooKeeper only
    leader-brokers   a partition leader cut from the other brokers only (not from ZooKeeper)
    bridge           a <-> b <-> c with a and c cut
    zk-leader        SIGKILL the ZooKeeper ensemble's leader, restart at heal (zookeepers=3)
At the end: workload stopped, every fault healed, dead processes restarted, then waited for
every partition to have a leader and a full ISR and the leader's HW (ListOffsets) to equal its
log end offset (read from its log.dirs), a final read of every partition from offset 0 to the
HW, the checker over history + final read, and the replica check over every broker's files.
"""
from __future__ import annotations

import itertools
import json
import random
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
              "zk-leader")


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
    rate: float = 40.0                # sends per second per producer
    faults: tuple = ("kill", "pause", "isolate-node", "isolate-leader", "leader-zk", "leader-brokers",
                     "bridge")
    fault_gap: tuple = (2.0, 5.0)     # seconds between a heal and the next fault
    fault_length: tuple = (3.0, 8.0)  # seconds a fault lasts
    session_timeout_ms: int = 3000
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
                p.purge()
                p.flush(1)
                self.generation += 1
                proc = f"{self.proc}.{self.generation}"
                p = self._producer()
                self._fatal = False
                cb = self._delivery(proc)
            if len(self.pending) > (1 if self.oneshot else 200):
                p.poll(0.05)
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
            p.poll(0)
            next_at += interval
            if next_at < time.monotonic():
                next_at = time.monotonic()
            while not self.stop.is_set() and time.monotonic() < next_at:
                p.poll(max(0.0, next_at - time.monotonic()))
        p.flush(15)
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
class Nemesis(threading.Thread):
    def __init__(self, cluster: Cluster, history: History, opts: Options, stop: threading.Event):
        super().__init__(name="nemesis", daemon=True)
        self.c, self.h, self.opts, self.stop = cluster, history, opts, stop
        self.rng = random.Random(opts.seed)
        self.faults: Counter = Counter()
        self.error: BaseException | None = None
        faults = [f for f in opts.faults if f in ALL_FAULTS]
        unknown = set(opts.faults) - set(ALL_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)} (known: {', '.join(ALL_FAULTS)})")
        if cluster.zk is None or len(cluster.zk.nodes) < 3:
            faults = [f for f in faults if f != "zk-leader"]
        self.choices = faults

    def _leader(self) -> int:
        """The leader of a random partition (a random live broker when none is known)."""
        p = self.rng.randrange(self.opts.partitions)
        try:
            leader = self.c.leader_of(TOPIC, p)
        except Exception:           # noqa: BLE001
            leader = -1
        if leader not in self.c.nodes or not self.c.nodes[leader].alive():
            live = [i for i, n in self.c.nodes.items() if n.alive()]
            leader = self.rng.choice(live or list(self.c.nodes))
        return leader

    def start_fault(self, kind: str):
        """Apply one fault; returns the heal function."""
        c = self.c
        if kind == "kill":
            b = self._leader()
            c.kill(b)
            return f"kill {b}", lambda: c.restart(b)
        if kind == "pause":
            b = self._leader()
            c.pause(b)
            return f"pause {b}", lambda: c.resume(b)
        if kind == "isolate-node":
            b = self.rng.choice(sorted(c.nodes))
            c.isolate(b)
            return f"isolate {b}", c.heal
        if kind == "isolate-leader":
            b = self._leader()
            c.isolate(b)
            return f"isolate leader {b}", c.heal
        if kind == "leader-zk":
            b = self._leader()
            c.cut_zookeeper(b)
            return f"cut leader {b} from zookeeper", c.heal
        if kind == "leader-brokers":
            b = self._leader()
            c.isolate_from_brokers(b)
            return f"cut leader {b} from brokers", c.heal
        if kind == "bridge":
            a, b, x = self.rng.sample(sorted(c.nodes), 3)
            c.bridge(a, b, x)
            return f"bridge {a}<->{b}<->{x}", c.heal
        if kind == "zk-leader":
            node = c.kill_zookeeper_leader()
            return f"kill zookeeper leader {node.myid}", lambda: c.restart_zookeeper(node)
        raise ValueError(kind)

    def run(self):
        try:
            while not self.stop.wait(self.rng.uniform(*self.opts.fault_gap)):
                kind = self.rng.choice(self.choices)
                what, heal = self.start_fault(kind)
                self.faults[kind] += 1
                self.h.add(proc="nemesis", type="info", f="nemesis", value=what, phase="start")
                self.stop.wait(self.rng.uniform(*self.opts.fault_length))
                heal()
                self.h.add(proc="nemesis", type="info", f="nemesis", value=what, phase="heal")
        except BaseException as e:      # noqa: BLE001
            self.error = e


# ---------------------------------------------------------------------- the end of a run
def heal_everything(c: Cluster, h: History) -> None:
    c.heal()
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
                 "  " + self.result.summary().replace("\n", "\n  ")]
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
    c = Cluster(base, brokers=opts.brokers, zookeepers=opts.zookeepers,
                session_timeout_ms=opts.session_timeout_ms, props=opts.broker_props)
    h = History(base / "history.jsonl")
    ok = False
    try:
        c.start()
        c.create_topic(TOPIC, opts.partitions, min(3, opts.brokers), {"min.insync.replicas": min(2, opts.brokers)})
        c.wait_healthy(TOPIC, opts.partitions)
        stop, stop_nemesis = threading.Event(), threading.Event()
        values = _Values()
        workers = [ProducerWorker(f"p{i}", c, h, values, opts, stop, oneshot=False) for i in range(opts.producers)]
        workers += [ProducerWorker(f"q{i}", c, h, values, opts, stop, oneshot=True)
                    for i in range(opts.oneshot_producers)]
        workers += [ConsumerWorker(f"c{i}", c, h, opts, stop) for i in range(opts.consumers)]
        workers.append(HwWatcher(c, h, opts, stop))
        nemesis = Nemesis(c, h, opts, stop_nemesis)
        for w in workers:
            w.start()
        nemesis.start()
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
        hws = wait_caught_up(c, opts.partitions)
        final = final_read(c, hws)
        h.close()
        res = check(h.events, final)
        assignment = c.describe(TOPIC)
        replicas = {p: {b: read_replica(c.nodes[b].log_dir, TOPIC, p) for b in assignment[p]["replicas"]}
                    for p in hws}
        res.merge(check_replicas(replicas, hws))
        explain_duplicates(res, lambda key: c.nodes[assignment[key]["leader"]].log_dir, TOPIC)
        (base / "final.json").write_text(json.dumps(final))
        report = RunReport(opts.seed, res, nemesis.faults, h.path, time.monotonic() - t0,
                           sum(len(f["records"]) for f in final.values()), errors)
        ok = res.valid and not errors
        return report
    finally:
        h.close()
        c.stop(print_logs=not ok)
