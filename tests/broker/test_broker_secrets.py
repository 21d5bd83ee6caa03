"""Secrets at rest: credentials of the tiered storage (and of an S3 root) are never written
into a log root, never logged by the broker and never echoed by the CLI.

Every file of a local root and every object of an S3 root and of the remote tier is read back
and searched for the configured key and secret: zero hits. A root written by an earlier seglog
(credentials in seglog-topics.json) is migrated on open with a warning.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: E402

from broker_helpers import create, produce, wait_until  # noqa: E402

from logcore.log.log_root import TOPICS_FILE, LogRoot  # noqa: E402
from logcore.storage import open_storage  # noqa: E402
from logcore.tools.cli import main  # noqa: E402

pytestmark = pytest.mark.s3

SERVICE = {"log.retention.check.interval.ms": "60000", "remote.log.manager.task.interval.ms": "200",
           "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "4096"}


def _tiered(endpoint, bucket: str, prefix: str = "tier") -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true",
            "rsm.config.storage.url": f"s3://{bucket}/{prefix}",
            "rsm.config.storage.endpoint_url": endpoint.endpoint_url,
            "rsm.config.storage.key": endpoint.key,
            "rsm.config.storage.secret": endpoint.secret,
            "rsm.config.storage.client_kwargs.region_name": endpoint.region}


def _hits(blobs: dict[str, bytes], *secrets: str) -> list[str]:
    return [f"{name}: {s}" for name, data in blobs.items() for s in secrets if s.encode() in data]


def _local_files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _objects(endpoint, bucket: str) -> dict[str, bytes]:
    storage = open_storage(f"s3://{bucket}", endpoint.storage_options())
    fs = storage._fs
    return {path: fs.cat_file(path) for path in fs.find(bucket)}


def test_broker_session_writes_and_logs_no_credentials(broker_factory, s3_endpoint, s3_bucket, tmp_path):
    settings = _tiered(s3_endpoint, s3_bucket)
    # The secret comes from a referenced owner-only file (Kafka's ${file:PATH:KEY}), the key
    # from broker.properties itself.
    creds = tmp_path / "s3-credentials.properties"
    creds.write_text(f"secret={s3_endpoint.secret}\n")
    creds.chmod(0o600)
    settings["rsm.config.storage.secret"] = f"${{file:{creds}:secret}}"
    b = broker_factory(**SERVICE, **settings)
    create(b, "cold", 1, TOPIC_CONFIG)
    acked = produce(b, "cold", [b"%04d" % i + b"v" * 200 for i in range(200)], acks="all",
                    **{"batch.num.messages": 5})
    assert all(err is None for err, *_ in acked)
    assert wait_until(lambda: any(name.endswith(".log") for name in _objects(s3_endpoint, s3_bucket)))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = next(iter(admin.describe_configs([ConfigResource("broker", "0")]).values())).result(10)
    described = "\n".join(f"{k}={v.value}" for k, v in configs.items())
    assert "rsm.config.storage.url=s3://" in described
    assert b.stop() == 0
    files = _local_files(b.root)
    assert TOPICS_FILE in files and any(n.endswith(".log") for n in files)
    assert _hits(files, s3_endpoint.key, s3_endpoint.secret) == []
    assert _hits(_objects(s3_endpoint, s3_bucket), s3_endpoint.key, s3_endpoint.secret) == []
    assert _hits({"broker log": b.log_text().encode(), "describe": described.encode()},
                 s3_endpoint.key, s3_endpoint.secret) == []
    assert "tiering copied" in b.log_text()              # the log is the session's, not empty


def test_old_root_with_credentials_is_migrated_on_open(broker_factory, s3_endpoint, s3_bucket, tmp_path):
    settings = _tiered(s3_endpoint, s3_bucket, "old-tier")
    root_dir = tmp_path / "old-root"
    with LogRoot.open(str(root_dir), create=True) as root:
        root.create_topic("t", 1)
    # An earlier seglog stored the broker's tiered settings, credentials included, in the root.
    doc = json.loads((root_dir / TOPICS_FILE).read_text())
    doc["defaults"] = dict(settings)
    (root_dir / TOPICS_FILE).write_text(json.dumps(doc))
    assert _hits(_local_files(root_dir), s3_endpoint.secret)            # the premise
    b = broker_factory(root_dir, **SERVICE, **settings)
    create(b, "cold", 1, TOPIC_CONFIG)
    assert b.stop() == 0
    log = b.log_text()
    assert "held credentials (rsm.config.storage.key, rsm.config.storage.secret)" in log
    assert _hits(_local_files(root_dir), s3_endpoint.key, s3_endpoint.secret) == []
    assert _hits({"log": log.encode()}, s3_endpoint.key, s3_endpoint.secret) == []
    stored = json.loads((root_dir / TOPICS_FILE).read_text())["defaults"]
    assert stored["rsm.config.storage.url"] == f"s3://{s3_bucket}/old-tier"   # the rest stays
    assert "rsm.config.storage.key" not in stored and "rsm.config.storage.secret" not in stored


def test_failed_access_check_writes_no_root(broker_factory, s3_endpoint, s3_bucket, tmp_path):
    settings = _tiered(s3_endpoint, "no-such-bucket-for-seglog")
    root_dir = tmp_path / "never"
    with pytest.raises(pytest.fail.Exception, match="cannot be written"):
        broker_factory(root_dir, **settings)
    assert not root_dir.exists()


def test_s3_root_and_cli_keep_credentials_out(s3_endpoint, s3_bucket, tmp_path, capsys):
    defaults = tmp_path / "root.properties"
    tiered = _tiered(s3_endpoint, s3_bucket, "tier")
    defaults.write_text("".join(f"{k}={v}\n" for k, v in tiered.items()))
    opts = [f"--storage-option={k}={v}" for k, v in (
        ("endpoint_url", s3_endpoint.endpoint_url), ("key", s3_endpoint.key),
        ("secret", s3_endpoint.secret), ("client_kwargs.region_name", s3_endpoint.region))]
    url = f"s3://{s3_bucket}/root"
    assert main(["topics", "--root", url, *opts, "--create", "t", "--partitions", "2",
                 "--defaults", str(defaults)]) == 0
    assert main(["topics", "--root", url, *opts, "--describe", "--all-configs"]) == 0
    # Errors do not echo credentials: userinfo in the URL, a numeric secret, an SSE-C key.
    assert main(["topics", "--root", f"s3://{s3_endpoint.key}:{s3_endpoint.secret}@/x", "--list"]) == 1
    assert main(["topics", "--root", url, "--list", "--storage-option=endpoint_url=http://127.0.0.1:9",
                 "--storage-option=key=73510042", "--storage-option=secret=99887766",
                 "--storage-option=s3_additional_kwargs.SSECustomerKey=sse-c-key-0451"]) == 1
    out = capsys.readouterr()
    text = (out.out + out.err).encode()
    assert b"Topic: t" in text and b"seglog: error" in text
    assert _hits({"cli": text}, s3_endpoint.key, s3_endpoint.secret, "73510042", "99887766",
                 "sse-c-key-0451") == []
    objects = _objects(s3_endpoint, s3_bucket)
    assert any(name.endswith(TOPICS_FILE) for name in objects)
    assert _hits(objects, s3_endpoint.key, s3_endpoint.secret) == []


def test_referenced_credentials_file_must_be_owner_only(tmp_path, capsys):
    creds = tmp_path / "creds.properties"
    creds.write_text("secret=k-55aa91\n")
    creds.chmod(0o644)
    conf = tmp_path / "broker.properties"
    conf.write_text(f"log.dirs={tmp_path / 'logs'}\nrsm.config.storage.secret=${{file:{creds}:secret}}\n")
    assert main(["broker", "--config", str(conf)]) == 1
    err = capsys.readouterr().err
    assert "mode 0644" in err and "chmod 600" in err and "k-55aa91" not in err
    assert not (tmp_path / "logs").exists()
