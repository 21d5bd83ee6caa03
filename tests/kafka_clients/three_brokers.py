"""Three brokers for the fault runs of these tests, with one interface: Apache Kafka's KRaft
cluster (tests/kafka_reference.py) or a seglog cluster over one ZooKeeper
(tests/cluster/seglog_cluster.py); `kill(i)` SIGKILLs broker i (1..3), `restart(i)` starts it
again and waits until it serves, `close()` stops every process it started."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

from transaction_check import TRANSACTION_SETTINGS  # noqa: E402

# Both clusters: everything replicated three ways, writes acknowledged by two.
REPLICATED = {
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "offsets.topic.replication.factor": "3", "default.replication.factor": "3", "min.insync.replicas": "2",
}


class KafkaThree:
    def __init__(self, jars, workdir: Path):
        from kafka_reference import KafkaCluster
        self.cluster = KafkaCluster.create(jars, workdir, 3, {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                TRANSACTION_SETTINGS["transaction.abort.timed.out.transaction.cleanup.interval.ms"]}).start()
        self.bootstrap = self.cluster.bootstrap

    def kill(self, i: int) -> None:
        self.cluster.nodes[i - 1].stop(signal.SIGKILL)

    def restart(self, i: int) -> None:
        self.cluster.nodes[i - 1].start()

    def close(self) -> None:
        self.cluster.stop(signal.SIGKILL)


class SeglogThree:
    def __init__(self, workdir: Path):
        from seglog_cluster import SeglogCluster
        from zookeeper_reference import ZooKeeperCluster
        self.zk = ZooKeeperCluster(workdir / "zk", size=1)
        self.cluster = None
        try:
            self.zk.start()         # ZooKeeperUnavailable: the caller skips with the reason
            self.cluster = SeglogCluster(workdir / "seglog", self.zk.connect_string, size=3,
                                         props={**TRANSACTION_SETTINGS, **REPLICATED})
            self.cluster.start()
        except BaseException:
            self.close()
            raise
        self.bootstrap = self.cluster.bootstrap

    def kill(self, i: int) -> None:
        self.cluster.brokers[i].kill()

    def restart(self, i: int) -> None:
        self.cluster.brokers[i].start()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        self.zk.stop()
