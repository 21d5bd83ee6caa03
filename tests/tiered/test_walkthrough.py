"""The tiered-storage walkthrough a Kafka user follows, on seglog (issue #29).

ZooKeeper from Debian's jars; one `seglog broker` whose properties end with the walkthrough's
block of Kafka and Aiven settings, appended verbatim except the S3 endpoint and the cache path;
SeaweedFS as the bucket; Kafka's own kafka-topics and kafka-producer-perf-test. Checked: segments
appear in the bucket, all 10,000 records read back from offset 0 through the broker and through
`format("seglog")`, and a segment copied out of the bucket passes Kafka's kafka-dump-log.

About 20 s with a warm SparkSession (the connector tests, which run before, start it); run alone
the first Spark job adds its Python workers' start (20-50 s on a loaded 2-core machine).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka_reference import KafkaUnavailable, resolve_jars  # noqa: E402
from zookeeper_reference import free_ports, running_zookeeper  # noqa: E402
from tests.connector.conftest import spark  # noqa: E402 - the session's SparkSession
import broker_spawner  # noqa: E402
from broker_process import subprocess_env  # noqa: E402

__all__ = ["spark"]  # a fixture this module takes from the connector tests

TOPIC = "tieredTopic"
BUCKET = "test-bucket"
PREFIX = "tiered-storage-demo/"

# The walkthrough's block, as a user appends it to server.properties ({endpoint} and {cache}
# stand for the two values a test must change).
BLOCK = """
# ----- Enable tiered storage -----
remote.log.storage.system.enable=true

# ----- Configure the remote log manager -----
remote.log.metadata.manager.class.name=org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager
remote.log.metadata.manager.listener.name=PLAINTEXT
# You may need to set this if you're experimenting with a single broker setup:
rlmm.config.remote.log.metadata.topic.replication.factor=1
rlmm.config.remote.log.metadata.topic.num.partitions=5

# ----- Configure the remote storage manager -----
remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager
# 4 MiB is the current recommended chunk size:
rsm.config.chunk.size=4194304

# ----- Configure the storage backend -----
rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3.S3Storage
rsm.config.storage.s3.bucket.name=test-bucket
rsm.config.storage.s3.region=us-east-1
rsm.config.storage.s3.endpoint.url={endpoint}
rsm.config.storage.s3.path.style.access.enabled=true
rsm.config.storage.aws.access.key.id=minioadmin
rsm.config.storage.aws.secret.access.key=minioadmin
rsm.config.storage.key.prefix=tiered-storage-demo/

# ----- Configure the fetch chunk cache -----
rsm.config.fetch.chunk.cache.class=io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache
rsm.config.fetch.chunk.cache.path={cache}
# Pick some cache size, 16 GiB here:
rsm.config.fetch.chunk.cache.size=17179869184
# Prefetching size, 16 MiB here:
rsm.config.fetch.chunk.cache.prefetch.max.size=16777216
"""


@pytest.fixture(scope="module")
def jars():
    try:
        return resolve_jars()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    with running_zookeeper(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture(scope="module")
def bucket(s3_servers):
    import boto3
    endpoint = s3_servers.get("seaweedfs")      # the walkthrough's MinIO, played by SeaweedFS
    client = boto3.client("s3", endpoint_url=endpoint.endpoint_url, aws_access_key_id="minioadmin",
                          aws_secret_access_key="minioadmin", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    yield endpoint.endpoint_url, client
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})
    client.delete_bucket(Bucket=BUCKET)


class WalkthroughBroker:
    """`seglog broker` with the walkthrough's server.properties (its own settings, then the block)."""

    def __init__(self, folder: Path, zk_hosts: str, endpoint: str):
        self.folder = folder
        self.port = free_ports(1)[0]
        self.log_dir = folder / "kafka-logs"
        own = {"broker.id": "1", "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
               "log.dirs": str(self.log_dir), "zookeeper.connect": zk_hosts,
               "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
               "group.initial.rebalance.delay.ms": "0",
               # The walkthrough's advice, to see tiering sooner:
               "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500"}
        text = "".join(f"{k}={v}\n" for k, v in own.items())
        text += BLOCK.format(endpoint=endpoint, cache=folder / "tiered-storage-cache")
        self.config = folder / "server.properties"
        self.config.write_text(text)
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        env = subprocess_env()
        with open(self.folder / "broker.log", "ab") as out:
            self.proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config",
                                              str(self.config)], stdout=out, stderr=subprocess.STDOUT,
                                             cwd=str(self.folder), env=env)
        deadline = time.monotonic() + timeout
        while f"listening on PLAINTEXT://{self.bootstrap}" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the broker did not start:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        path = self.folder / "broker.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _wait(condition, timeout: float, what: str, broker: WalkthroughBroker):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; broker log ends:\n{broker.log()[-3000:]}")
        time.sleep(0.2)


def _remote_objects(client) -> dict[str, int]:
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX):
        found.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return found


def test_walkthrough(tmp_path, zookeeper, bucket, jars, spark):
    import confluent_kafka as ck

    endpoint, client = bucket
    broker = WalkthroughBroker(tmp_path, zookeeper.connect_string, endpoint)
    broker.start()
    try:
        created = jars.run_tool(jars.topic_command, [
            "--bootstrap-server", broker.bootstrap, "--create", "--topic", TOPIC, "--partitions", "1",
            "--replication-factor", "1", "--config", "remote.storage.enable=true",
            # The walkthrough's 512000: Kafka 4's kafka-topics refuses segment.bytes below 1 MiB.
            "--config", "segment.bytes=1048576", "--config", "local.retention.bytes=1",
            "--config", "retention.bytes=1073741824"])
        assert created.returncode == 0, created.stderr[-3000:]
        perf = jars.run_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", TOPIC, "--num-records", "10000", "--record-size", "1000", "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=1", "batch.size=16384"],
            timeout=120)
        assert perf.returncode == 0 and "10000 records sent" in perf.stdout, perf.stdout + perf.stderr[-3000:]

        # The segments appear in the bucket, and leave the local disk (local.retention.bytes=1).
        local = broker.log_dir / f"{TOPIC}-0"
        _wait(lambda: len([k for k in _remote_objects(client) if k.endswith(".log")]) >= 8,
              30, "segments in the bucket", broker)
        _wait(lambda: len(list(local.glob("*.log"))) <= 2, 30, "local segments deleted", broker)
        objects = _remote_objects(client)
        logs = sorted(k for k in objects if k.endswith(".log"))
        assert all(k.startswith(f"{PREFIX}{TOPIC}-") for k in logs)

        # All 10,000 records from offset 0 through the broker (most of them only in the bucket).
        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "walkthrough",
                                "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
            offsets, deadline = [], time.monotonic() + 60
            while time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                    break
                assert len(m.value()) == 1000
                offsets.append(m.offset())
        finally:
            consumer.close()
        # acks=1 without idempotence (the walkthrough's settings): a batch the producer resent
        # after a timeout on a loaded machine is in the log twice, as on Kafka; never fewer.
        assert len(offsets) >= 10000 and offsets == list(range(len(offsets))), (len(offsets), offsets[:5])

        # And through format("seglog") on the broker's log dir (credentials as reader options).
        creds = {"rsm.config.storage.aws.access.key.id": "minioadmin",
                 "rsm.config.storage.aws.secret.access.key": "minioadmin"}
        df = spark.read.format("seglog").options(**creds).option("subscribe", TOPIC).load(str(broker.log_dir))
        rows = df.selectExpr("offset", "length(value) AS n").collect()
        assert sorted(r.offset for r in rows) == offsets and {r.n for r in rows} == {1000}

        # A segment copied out of the bucket is a plain Kafka segment: kafka-dump-log reads it.
        segment = logs[1]
        folder, name = segment.rsplit("/", 1)
        out = tmp_path / "copied"
        out.mkdir()
        base = name[:-len(".log")]
        for suffix in (".log", ".index", ".timeindex"):
            client.download_file(BUCKET, f"{folder}/{base}{suffix}", str(out / f"{base}{suffix}"))
        dumped = jars.dump_log_segments([out / f"{base}.log", out / f"{base}.index"], "--deep-iteration")
        assert dumped.returncode == 0, dumped.stderr[-3000:]
        records = [line for line in dumped.stdout.splitlines() if line.startswith("| offset:")]
        assert len(records) > 100 and int(records[0].split()[2]) == int(base)
        assert "Mismatches" not in dumped.stdout and "corrupt" not in dumped.stdout.lower(), dumped.stdout[-2000:]
    finally:
        broker.stop()
