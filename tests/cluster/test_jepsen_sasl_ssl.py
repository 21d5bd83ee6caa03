"""The Jepsen-style short run (test_jepsen.py's first seed: kill, pause and the partition faults
for ~20 s on a standalone ZooKeeper) on a 3-broker cluster whose inter-broker listener is
SASL_SSL: the followers' fetches and the controller's and coordinators' calls go through the
harness's proxies to each broker's SASL_SSL listener (PLAIN inside mutual TLS, settings from
bench/jepsen_cluster.py --inter-broker sasl_ssl); the clients stay on PLAINTEXT. The history must
check valid: nothing acknowledged lost, offsets consistent."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import cluster_support
from jepsen import ALL_FAULTS, NEW_FAULTS, Options, run_once

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from jepsen_cluster import inter_broker_props  # noqa: E402

pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")
pytestmark = [pytest.mark.jepsen, pytest.mark.soak]     # ~60 s of a 3-broker cluster: -m soak


def test_cluster_under_faults_with_a_sasl_ssl_inter_broker_listener(tmp_path):
    reason = cluster_support()
    if reason:
        pytest.skip(reason)
    props = inter_broker_props("sasl_ssl", tmp_path / "pki")
    faults = tuple(f for f in ALL_FAULTS if f != "zk-leader" and f not in NEW_FAULTS)
    opts = Options(seed=1, duration=20, faults=faults, fault_gap=(1.0, 3.0), fault_length=(3.0, 9.0),
                   broker_props=props)
    report = run_once(tmp_path / "run", opts)
    print(report.summary())
    assert not report.errors, report.summary()
    assert report.result.valid, report.summary()
    assert sum(report.faults.values()) >= 2 and report.result.stats["sends_ok"] > 0
    # the brokers' own traffic went over the SASL_SSL listener
    for i in (1, 2, 3):
        log = (tmp_path / "run" / f"broker-{i}.log").read_text(errors="replace")
        assert "(inter-broker listener INTERNAL)" in log
