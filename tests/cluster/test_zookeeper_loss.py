"""A controller pass cut short by the loss of its ZooKeeper server (3-node ensemble, real
brokers): the pass that handles a dead broker fails mid-way with ConnectionLoss, and the
controller must run it again once its session moved to another server, with no further event
(the /brokers/ids change has been seen). Every partition then has a live leader."""
from __future__ import annotations

import json
import threading
import time

import pytest

from harness import Cluster, cluster_support, wait_until

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
pytestmark = pytest.mark.skipif(cluster_support() is not None, reason=str(cluster_support()))

PARTITIONS = 50


def _states(zk, topic):
    base = f"/brokers/topics/{topic}/partitions"
    return {int(p): json.loads(zk.get(f"{base}/{p}/state")[0]) for p in zk.get_children(base)}


def test_controller_pass_cut_by_its_zookeeper_server_dying_is_run_again(tmp_path):
    from kazoo.client import KazooClient
    with Cluster(tmp_path, brokers=3, zookeepers=3) as c:
        c.create_topic("t", PARTITIONS, replication_factor=3)
        zk = KazooClient(hosts=c.zk.connect_string, timeout=5)
        zk.start(timeout=15)
        try:
            controller = json.loads(zk.get("/controller")[0])["brokerid"]
            victim = next(i for i in c.nodes if i != controller)
            led = sorted(p for p, s in _states(zk, "t").items() if s["leader"] == victim)
            assert len(led) > 5, f"broker {victim} leads only {led}"
            server = c.zookeeper_of(controller)
            assert server is not None, "no open ZooKeeper link of the controller"
            # The pass handling the victim's death writes every state in partition order:
            # once partition 0's changed, it is under way with the others still to write.
            started = threading.Event()
            def on_state(data, stat):
                if stat is not None and json.loads(data)["leader_epoch"] > 0:
                    started.set()
            zk.DataWatch("/brokers/topics/t/partitions/0/state", on_state)
            c.kill(victim)
            assert started.wait(30), "the controller did not act on the victim's death"
            server.kill()
            t0 = time.monotonic()
            live = set(c.nodes) - {victim}

            def every_leader_live():
                try:
                    states = _states(zk, "t")
                except Exception:           # noqa: BLE001 - our own session moving
                    return False
                return len(states) == PARTITIONS and all(s["leader"] in live for s in states.values())
            wait_until(every_leader_live, 30, f"every partition led by {sorted(live)} in ZooKeeper"
                       f" (broker {victim} led {led})")

            def metadata_agrees():
                try:
                    d = c.describe("t")
                except Exception:           # noqa: BLE001 - leaders moving
                    return False
                return len(d) == PARTITIONS and all(s["leader"] in live for s in d.values())
            wait_until(metadata_agrees, 30, f"every partition led by {sorted(live)} in Metadata")
            print(f"every leader live {time.monotonic() - t0:.1f} s after ZooKeeper node {server.myid}"
                  f" (the controller's) died")
        finally:
            zk.stop()
            zk.close()
