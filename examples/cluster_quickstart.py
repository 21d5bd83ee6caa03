"""A three-broker seglog cluster on one machine: ZooKeeper, three `seglog broker` processes,
a topic with three replicas, acks=all writes, a leader killed with SIGKILL, and every
acknowledged record read back from the new leader.

    python examples/cluster_quickstart.py [--zookeeper host:port] [--records N]

Needs confluent-kafka (`pip install confluent-kafka`, or the checkout's `pip install -e ".[test]"`).
Without --zookeeper it starts a ZooKeeper server from Debian's `zookeeper` package jars
(`apt-get install zookeeper`) on a free port of 127.0.0.1. Everything it starts runs in a
temporary folder and is stopped at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_zookeeper(folder: str) -> tuple[subprocess.Popen, str]:
    java = shutil.which("java")
    if java is None or not os.path.exists(ZOOKEEPER_JAR):
        sys.exit("needs java and ZooKeeper's jars (apt-get install zookeeper), or --zookeeper host:port")
    port = free_port()
    os.makedirs(f"{folder}/zk-data")
    with open(f"{folder}/zoo.cfg", "w") as f:
        f.write(f"tickTime=500\ndataDir={folder}/zk-data\nclientPort={port}\n"
                "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n")
    proc = subprocess.Popen([java, "-cp", f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
                             "org.apache.zookeeper.server.quorum.QuorumPeerMain", f"{folder}/zoo.cfg"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 1) as s:
                s.sendall(b"srvr")
                if b"Mode:" in s.recv(1024):
                    return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("ZooKeeper did not start")


def seglog(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logcore.tools.cli", *args], check=True, text=True,
                          capture_output=True, **kw)


def start_broker(folder: str, broker_id: int, port: int, zookeeper: str) -> subprocess.Popen:
    """Starts a broker process; wait_listening() waits for it (the three start side by side)."""
    config = f"{folder}/broker-{broker_id}.properties"
    with open(config, "w") as f:
        f.write(f"broker.id={broker_id}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                f"log.dirs={folder}/broker-{broker_id}\nzookeeper.connect={zookeeper}\n"
                "zookeeper.session.timeout.ms=3000\ndefault.replication.factor=3\n"
                "min.insync.replicas=2\nreplica.lag.time.max.ms=6000\n"
                "controlled.shutdown.retry.backoff.ms=500\n")
    log = open(f"{folder}/broker-{broker_id}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", config],
                            stdout=log, stderr=subprocess.STDOUT)


def wait_listening(folder: str, broker_id: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(open(f"{folder}/broker-{broker_id}.log").read())
        if b"listening on" in open(f"{folder}/broker-{broker_id}.log", "rb").read():
            return
        time.sleep(0.1)
    sys.exit(f"broker {broker_id} did not start")


def describe(bootstrap: str) -> str:
    return seglog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "events").stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zookeeper", help="an existing ZooKeeper (host:port); default: start one")
    ap.add_argument("--records", type=int, default=20000)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="seglog-cluster-")
    procs: dict[int, subprocess.Popen] = {}
    zk = None
    try:
        zookeeper = args.zookeeper
        if zookeeper is None:
            zk, zookeeper = start_zookeeper(folder)
            zookeeper += "/seglog-quickstart"
        ports = {i: free_port() for i in (1, 2, 3)}
        for i, port in ports.items():
            procs[i] = start_broker(folder, i, port, zookeeper)
        for i, proc in procs.items():
            wait_listening(folder, i, proc)
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        seglog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "events",
               "--partitions", "3", "--replication-factor", "3")
        print(describe(bootstrap))

        acked = {}

        def produce(first: int, count: int) -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

            def report(err, msg):
                if err is None:
                    acked[msg.value()] = (msg.partition(), msg.offset())
            for i in range(first, first + count):
                producer.produce("events", key=b"k%d" % (i % 100), value=b"event-%d" % i, on_delivery=report)
                producer.poll(0)
            producer.flush(60)

        t0 = time.monotonic()
        produce(0, args.records // 2)
        print(f"{len(acked)} records acknowledged by 2+ replicas (acks=all) in {time.monotonic() - t0:.1f} s")
        leader = int(describe(bootstrap).split("Partition: 0\tLeader: ")[1].split()[0])
        print(f"SIGKILL broker {leader}, the leader of events-0")
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()
        t0 = time.monotonic()
        produce(args.records // 2, args.records - args.records // 2)
        print(f"{len(acked)} records acknowledged in all ({time.monotonic() - t0:.1f} s for the second half,"
              " election included)")
        print(describe(bootstrap))

        # A reader of assigned partitions that commits nothing: with one broker of three down,
        # __consumer_offsets (replication factor 3) cannot be created, and a consumer that has
        # offsets to commit waits for a coordinator at close() until its session timeout (45 s).
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "quickstart",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("events", p, 0) for p in range(3)])
        seen, ends = {}, set()
        deadline = time.monotonic() + 60
        while len(ends) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    ends.add(msg.partition())
                continue
            seen[msg.value()] = (msg.partition(), msg.offset())
        consumer.close()
        lost = [v for v, where in acked.items() if seen.get(v) != where]
        print(f"read back {len(seen)} records; acknowledged but missing or moved: {len(lost)}")
        return 0 if not lost and len(seen) == len(acked) == args.records else 1
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if zk is not None:
            zk.terminate()
            zk.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
