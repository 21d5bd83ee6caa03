"""The seglog command line against a 3-broker seglog cluster, beside Kafka's own tools:
`leader-election --all-topic-partitions` lists only what it moved (nothing when nothing needed
an election, as Kafka's LeaderElectionCommand prints against Apache Kafka), `topics --describe
--under-replicated-partitions` prints what kafka-topics prints, and a broker stopped cleanly
(SIGTERM) logs its ZooKeeper session closing at INFO, never as an expiry. Then Kafka's
kafka-consumer-groups and `seglog consumer-groups` reset, describe and list groups whose
coordinators are spread over the brokers (tests/kafka_ref/group_reset_scenario.py) alike."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from seglog_cluster import SeglogCluster

from logcore.tools.cli import main

pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka_ref"))
import group_reset_scenario  # noqa: E402

pytestmark = pytest.mark.soak   # a 3-broker cluster and Kafka's tools, ~25 s: -m soak


LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"


def seglog(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_leader_election_under_replicated_and_a_clean_stop(capsys, tmp_path, zk_hosts, kafka_jars):
    with SeglogCluster.running(tmp_path, zk_hosts, size=3) as c:
        bs = ("--bootstrap-server", c.bootstrap)
        assert seglog(capsys, "topics", *bs, "--create", "--topic", "el", "--partitions", "3",
                      "--replication-factor", "3")[:2] == (0, "Created topic el.\n")
        c.wait_for(lambda: all(leader >= 0 and len(isr) == 3 for leader, _r, isr in c.metadata("el").values()),
                   30, "leaders and full ISRs of el")
        preferred = {p: replicas[0] for p, (_l, replicas, _i) in c.metadata("el").items()}

        # every leader is its preferred replica: nothing is elected, nothing is listed
        election = ("leader-election", *bs, "--election-type", "preferred", "--all-topic-partitions")
        assert seglog(capsys, *election) == (0, "", "")
        theirs = kafka_jars.run_tool(LEADER_ELECTION, list(election[1:]))
        assert (theirs.returncode, theirs.stdout) == (0, ""), theirs.stderr[-2000:]

        # broker 1 stops cleanly: its session closes at INFO, it leaves the ISRs
        stopped = c.brokers[1]
        assert stopped.stop() == 0
        log = stopped.log_text()
        assert "ZooKeeper session closed" in log and "ZooKeeper session expired" not in log, log[-3000:]
        c.wait_for(lambda: all(1 not in isr for _l, _r, isr in c.metadata("el").values()), 30, "ISRs without 1")
        describe = ("topics", *bs, "--describe", "--topic", "el", "--under-replicated-partitions")
        code, out, _ = seglog(capsys, *describe)
        theirs = kafka_jars.run_tool(kafka_jars.topic_command, list(describe[1:]))
        assert code == 0 and theirs.returncode == 0 and out == theirs.stdout, (out, theirs.stdout, theirs.stderr)
        assert len(out.splitlines()) == 3 and all(line.startswith("\tTopic: el\tPartition: ") for line in
                                                  out.splitlines())

        # back in the ISRs, broker 1 leads none: the election moves exactly its preferred partitions
        stopped.start()
        c.wait_for(lambda: all(len(isr) == 3 for _l, _r, isr in c.metadata("el").values()), 60, "full ISRs")
        moved = sorted(p for p, broker in preferred.items() if broker == 1 and c.leader_of("el", p) != 1)
        assert moved, "no leadership to move back"
        code, out, err = seglog(capsys, *election)
        assert (code, err) == (0, "")
        assert out == ("Successfully completed leader election (PREFERRED) for partitions "
                       + ", ".join(f"el-{p}" for p in moved) + "\n")
        assert seglog(capsys, "topics", *bs, "--describe", "--under-replicated-partitions")[:2] == (0, "")

        # kafka-consumer-groups against the cluster: each group's coordinator found wherever it is
        active = group_reset_scenario.prepare(c.bootstrap)
        try:
            program = group_reset_scenario.compile_tool_batch(kafka_jars, tmp_path / "tool-batch")
            group_reset_scenario.check(group_reset_scenario.kafka_tool(program, c.bootstrap),
                                       group_reset_scenario.seglog_tool(c.bootstrap), c.bootstrap)
        finally:
            active.close()
