"""Kafka's and Aiven's tiered-storage settings (the walkthrough's broker.properties block): each
accepted name changes what seglog does, the others are refused naming the setting; the copy and
fetch quotas slow the remote log manager; the remote storage metrics count what it did."""
from __future__ import annotations

import time

import pytest

from logcore.broker.config import BrokerConfig
from logcore.errors import InvalidConfigError
from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.storage.secrets import split_secrets
from logcore.tiered.config import TOPIC_BASED_RLMM_CLASS, TieredConfig
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from logcore.tiered.plugin_names import DISK_CACHE, MEMORY_CACHE, S3_BACKEND
from logcore.tiered.quota import ByteRateQuota
from tests.tiered.tiered_root import all_batches, produce, tiering_defaults

A = "io.aiven.kafka.tieredstorage."
BLOCK = {
    "remote.log.storage.system.enable": "true",
    "remote.log.metadata.manager.class.name": TOPIC_BASED_RLMM_CLASS,
    "remote.log.metadata.manager.listener.name": "PLAINTEXT",
    "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
    "remote.log.storage.manager.class.name": A + "RemoteStorageManager",
    "rsm.config.chunk.size": "4194304",
    "rsm.config.storage.backend.class": S3_BACKEND,
    "rsm.config.storage.s3.bucket.name": "test-bucket",
    "rsm.config.storage.s3.region": "us-east-1",
    "rsm.config.storage.s3.endpoint.url": "http://127.0.0.1:9000",
    "rsm.config.storage.s3.path.style.access.enabled": "true",
    "rsm.config.storage.aws.access.key.id": "minioadmin",
    "rsm.config.storage.aws.secret.access.key": "minioadmin-secret",
    "rsm.config.storage.key.prefix": "tiered-storage-demo/",
    "rsm.config.fetch.chunk.cache.class": DISK_CACHE,
    "rsm.config.fetch.chunk.cache.path": "/var/cache/tiered",
    "rsm.config.fetch.chunk.cache.size": "17179869184",
    "rsm.config.fetch.chunk.cache.prefetch.max.size": "16777216",
}


def parse(**changes) -> TieredConfig:
    props = dict(BLOCK)
    for name, value in changes.items():
        name = name.replace("__", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    return TieredConfig.from_props(props)


def test_the_walkthrough_block_maps_onto_seglog_settings():
    cfg = parse()
    assert cfg.enabled and cfg.storage_url == "s3://test-bucket/tiered-storage-demo"
    assert cfg.storage_options == {
        "endpoint_url": "http://127.0.0.1:9000", "client_kwargs": {"region_name": "us-east-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "key": "minioadmin", "secret": "minioadmin-secret"}
    assert cfg.chunk_size == 4194304
    assert (cfg.memory_cache_size, cfg.disk_cache_size, cfg.disk_cache_path) == (0, 17179869184, "/var/cache/tiered")
    assert cfg.prefetch_max_size == 16777216
    assert cfg.metadata_topic_replication_factor == 1 and cfg.metadata_topic_partitions == 5
    # The broker takes the block beside its own settings.
    broker = BrokerConfig.from_props({**BLOCK, "log.dirs": "/data", "listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert broker.tiered.storage_url == cfg.storage_url


@pytest.mark.parametrize("name, value, check", [
    ("rsm.config.storage.s3.region", "eu-west-3",
     lambda c: c.storage_options["client_kwargs"]["region_name"] == "eu-west-3"),
    ("rsm.config.storage.s3.path.style.access.enabled", "false",
     lambda c: c.storage_options["config_kwargs"]["s3"]["addressing_style"] == "virtual"),
    ("rsm.config.storage.s3.endpoint.url", "http://127.0.0.1:1",
     lambda c: c.storage_options["endpoint_url"] == "http://127.0.0.1:1"),
    ("rsm.config.storage.s3.bucket.name", "other", lambda c: c.storage_url.startswith("s3://other/")),
    ("rsm.config.storage.key.prefix", "a/b/", lambda c: c.storage_url == "s3://test-bucket/a/b"),
    ("rsm.config.storage.aws.access.key.id", "id2", lambda c: c.storage_options["key"] == "id2"),
    ("rsm.config.storage.aws.secret.access.key", "s2", lambda c: c.storage_options["secret"] == "s2"),
    ("rsm.config.chunk.size", "65536", lambda c: c.chunk_size == 65536),
    ("rsm.config.fetch.chunk.cache.size", "-1", lambda c: c.disk_cache_size >= 2**62),
    ("rsm.config.fetch.chunk.cache.path", "/elsewhere", lambda c: c.disk_cache_path == "/elsewhere"),
    ("rsm.config.fetch.chunk.cache.prefetch.max.size", "0", lambda c: c.prefetch_max_size == 0),
    ("rsm.config.fetch.chunk.cache.class", MEMORY_CACHE,
     lambda c: (c.memory_cache_size, c.disk_cache_size) == (17179869184, 0)),
    ("rlmm.config.remote.log.metadata.topic.num.partitions", "7", lambda c: c.metadata_topic_partitions == 7),
    ("rlmm.config.remote.log.metadata.topic.replication.factor", "2",
     lambda c: c.metadata_topic_replication_factor == 2),
    ("rlmm.config.remote.log.metadata.topic.retention.ms", "86400000",
     lambda c: c.metadata_topic_retention_ms == 86400000),
    ("remote.log.manager.copy.max.bytes.per.second", "1000", lambda c: c.copy_max_bytes_per_second == 1000),
    ("remote.log.manager.fetch.max.bytes.per.second", "1000", lambda c: c.fetch_max_bytes_per_second == 1000),
    ("rsm.config.compression.enabled", "true", lambda c: c.compression == "on"),
    ("rsm.config.upload.rate.limit.bytes.per.second", "2097152", lambda c: c.upload_rate_limit == 2097152),
    ("rsm.config.fetch.manifest.cache.size", "5", lambda c: c.manifest_cache_entries == 5),
    ("rsm.config.fetch.indexes.cache.size", "4096", lambda c: c.index_cache_size == 4096),
    ("rsm.config.storage.s3.multipart.upload.part.size", "6291456", lambda c: c.upload_part_size == 6291456),
])
def test_each_setting_changes_what_seglog_does(name, value, check):
    before = parse()
    after = parse(**{name.replace(".", "__"): value})
    assert check(after) and not check(before)


def test_compression_heuristic_and_rsm_from_the_names(tmp_path):
    cfg = parse(**{"rsm__config__compression__enabled": "true",
                   "rsm__config__compression__heuristic__enabled": "true"})
    assert cfg.compression == "heuristic"
    assert parse(**{"rsm__config__compression__heuristic__enabled": "true"}).compression == "off"
    # The filesystem backend: a folder, with the key prefix below it.
    props = {"remote.log.storage.system.enable": "true",
             "rsm.config.storage.backend.class": A + "storage.filesystem.FileSystemStorage",
             "rsm.config.storage.root": str(tmp_path), "rsm.config.key.prefix": "p",
             "rsm.config.fetch.chunk.cache.class": MEMORY_CACHE, "rsm.config.fetch.chunk.cache.size": "1000"}
    cfg = TieredConfig.from_props(props)
    assert cfg.storage_url == f"{tmp_path}/p"
    rsm = FsspecRemoteStorageManager.from_config(cfg)
    assert rsm.cache.memory.max_bytes == 1000 and rsm.cache.disk is None and rsm.prefetch_chunks == 0
    rsm.close()


@pytest.mark.parametrize("changes, named", [
    ({"remote.log.storage.manager.class.name": "com.example.Rsm"}, "remote.log.storage.manager.class.name"),
    ({"remote.log.metadata.manager.class.name": "com.example.Rlmm"}, "remote.log.metadata.manager.class.name"),
    ({"remote.log.metadata.manager.class.name": None}, "rlmm.config.remote.log.metadata.topic"),
    ({"rlmm.config.remote.log.metadata.consume.wait.ms": "1"}, "rlmm.config.remote.log.metadata.consume.wait.ms"),
    ({"rsm.config.storage.backend.class": A + "storage.x.XStorage"}, "rsm.config.storage.backend.class"),
    ({"rsm.config.storage.backend.class": A + "storage.gcs.GcsStorage"}, "gcsfs"),
    ({"rsm.config.storage.backend.class": A + "storage.azure.AzureBlobStorage"}, "adlfs"),
    ({"rsm.config.storage.backend.class": None}, "rsm.config.key.prefix needs rsm.config.storage.backend.class"),
    ({"rsm.config.storage.s3.bucket.name": None}, "rsm.config.storage.s3.bucket.name"),
    ({"rsm.config.storage.s3.api.call.timeout": "5"}, "rsm.config.storage.s3.api.call.timeout"),
    ({"rsm.config.storage.url": "s3://b/p"}, "rsm.config.storage.url and rsm.config.storage.backend.class"),
    ({"rsm.config.fetch.chunk.cache.class": "x.Cache"}, "rsm.config.fetch.chunk.cache.class"),
    ({"rsm.config.fetch.chunk.cache.size": None}, "rsm.config.fetch.chunk.cache.size"),
    ({"rsm.config.fetch.chunk.cache.path": None}, "rsm.config.fetch.chunk.cache.path"),
    ({"rsm.config.fetch.chunk.cache.retention.ms": "600000"}, "rsm.config.fetch.chunk.cache.retention.ms"),
    ({"rsm.config.fetch.chunk.cache.disk.size": "5"}, "rsm.config.fetch.chunk.cache.disk.size"),
    ({"rsm.config.custom.metadata.fields.include": "REMOTE_SIZE"}, "rsm.config.custom.metadata.fields.include"),
    ({"rsm.config.chunk.size": "x"}, "rsm.config.chunk.size"),
    ({"rsm.config.storage.s3.path.style.access.enabled": "maybe"}, "rsm.config.storage.s3.path.style.access.enabled"),
    ({"rsm.config.upload.rate.limit.bytes.per.second": "1000"}, "rsm.config.upload.rate.limit.bytes.per.second"),
    ({"remote.log.manager.copy.max.bytes.per.second": "0"}, "remote.log.manager.copy.max.bytes.per.second"),
    ({"remote.log.storage.manager.class.path": "/opt/plugin/*"}, "remote.log.storage.manager.class.path"),
])
def test_refused_settings_name_themselves(changes, named):
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        parse(**{k.replace(".", "__"): v for k, v in changes.items()})


def test_listener_name_must_be_a_listener_and_credentials_are_not_stored():
    props = {**BLOCK, "log.dirs": "/data", "listeners": "PLAINTEXT://127.0.0.1:9092"}
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.metadata\.manager\.listener\.name=INTERNAL"):
        BrokerConfig.from_props({**props, "remote.log.metadata.manager.listener.name": "INTERNAL"})
    stored, private = split_secrets(BLOCK)
    assert set(private) == {"rsm.config.storage.aws.access.key.id", "rsm.config.storage.aws.secret.access.key"}


def test_quota_token_bucket_waits_for_debt():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s
    quota = ByteRateQuota(1000, clock=lambda: now[0], sleep=sleep)
    assert quota.acquire(3000) == 0          # the first transfer goes at once
    assert quota.acquire(10) == pytest.approx(3.0)   # the next waits until it is paid for
    now[0] += 100                            # idle: the bucket refills to one second only
    assert quota.acquire(1500) == 0 and quota.acquire(1) == pytest.approx(0.5)
    assert ByteRateQuota(None).acquire(10**12) == 0


def _copy_seconds(tmp_path, name: str, quota: dict[str, str]) -> tuple[float, int, object]:
    root = LogRoot.open(str(tmp_path / name), create=True,
                        defaults={**tiering_defaults(str(tmp_path / f"{name}-remote")), **quota})
    root.create_topic("t", config={"remote.storage.enable": "true", "segment.bytes": "8192",
                                   "local.retention.bytes": "1", "retention.bytes": "-1"})
    log = root.log("t", 0, writer=True)
    produce(log, 30)                                   # ~7 segments of 8 KiB
    started = time.monotonic()
    outcome = MaintenanceService(root).maintain_log(log, int(time.time() * 1000))
    elapsed = time.monotonic() - started
    assert all_batches(log, 0)                         # everything still reads, remote part too
    metrics = root.remote_tier().metrics
    root.close()
    return elapsed, outcome.tiering.bytes_copied, metrics


def test_copy_quota_slows_copying_and_metrics_count_it(tmp_path):
    fast, copied, metrics = _copy_seconds(tmp_path, "fast", {})
    rate = 25000
    slow, copied_slow, slow_metrics = _copy_seconds(
        tmp_path, "slow", {"remote.log.manager.copy.max.bytes.per.second": str(rate)})
    assert copied == copied_slow > 5 * 8000
    # Past the bucket's depth (one second's worth), every segment but the first waits for the
    # ones before it.
    floor = (copied_slow - 9000 - rate) / rate
    assert slow >= floor, (fast, slow, floor)
    stats = slow_metrics.topic("t")
    assert stats.copy_bytes == copied_slow and stats.copy_segments >= 5 and stats.copy_errors == 0
    assert stats.copy_throttle_seconds > 0.3          # the rest of the floor: copying refills
    assert metrics.topic("t").copy_throttle_seconds == 0      # no quota: nothing waited
    assert stats.fetch_bytes > 0 and stats.fetch_requests > 0     # all_batches read the remote part


def test_fetch_quota_slows_remote_reads(tmp_path):
    root = LogRoot.open(str(tmp_path / "r"), create=True, defaults={
        **tiering_defaults(str(tmp_path / "remote")), "remote.log.manager.fetch.max.bytes.per.second": "30000"})
    root.create_topic("t", config={"remote.storage.enable": "true", "segment.bytes": "8192",
                                   "local.retention.bytes": "1", "retention.bytes": "-1"})
    log = root.log("t", 0, writer=True)
    produce(log, 30)
    MaintenanceService(root).maintain_log(log, int(time.time() * 1000))
    assert log.local_log_start_offset > 0
    started = time.monotonic()
    data = all_batches(log, 0, max_bytes=8192)
    elapsed = time.monotonic() - started
    stats = root.remote_tier().metrics.topic("t")
    assert stats.fetch_bytes > 40000
    assert elapsed >= (stats.fetch_bytes - 9000 - 30000) / 30000 and stats.fetch_throttle_seconds > 0.5
    assert len(data) > stats.fetch_bytes * 0.9
    root.close()
