"""rsm.config.* and root tiered settings: parsing, validation, errors naming the setting."""
from __future__ import annotations

import pytest

from logcore.errors import InvalidConfigError
from logcore.log.config import LogConfig
from logcore.log.properties_file import load_properties
from logcore.tiered.config import TieredConfig, check_topic_tiering
from logcore.tiered.fsspec_rsm import FsspecRemoteStorageManager
from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf" / "tiered-storage.properties"


def test_defaults_and_storage_options():
    cfg = TieredConfig.from_props({
        "remote.log.storage.system.enable": "true", "rsm.config.storage.url": "s3://b/p",
        "rsm.config.storage.endpoint_url": "http://127.0.0.1:9000",
        "rsm.config.storage.client_kwargs.region_name": "eu-west-1",
        "rsm.config.chunk.size": "1048576", "rsm.config.compression": "heuristic",
        "log.retention.hours": "5"})
    assert cfg.enabled and cfg.chunk_size == 1 << 20 and cfg.compression == "heuristic"
    assert cfg.storage_options == {"endpoint_url": "http://127.0.0.1:9000",
                                   "client_kwargs": {"region_name": "eu-west-1"}}
    assert TieredConfig.from_props().memory_cache_size == 64 << 20


@pytest.mark.parametrize("props, named", [
    ({"rsm.config.chunk.size": "0"}, "rsm.config.chunk.size"),
    ({"rsm.config.compression": "zip"}, "rsm.config.compression"),
    ({"rsm.config.chunk.sise": "4096"}, "did you mean 'rsm.config.chunk.size'"),
    ({"remote.log.storage.system.enable": "true"}, "rsm.config.storage.url"),
    ({"rsm.config.encryption.enabled": "true"}, "rsm.config.encryption.key.pair.id"),
    ({"rsm.config.encryption.enabled": "true", "rsm.config.encryption.key.pair.id": "k9",
      "rsm.config.encryption.key.pairs": "k1"}, "k9 is not one of rsm.config.encryption.key.pairs"),
    ({"rsm.config.encryption.key.pairs": "k1"}, "rsm.config.encryption.key.pairs.k1.public.key.file"),
    ({"rsm.config.fetch.chunk.cache.disk.size": "100"}, "rsm.config.fetch.chunk.cache.path"),
    ({"rsm.config.upload.part.size": "1000"}, "rsm.config.upload.part.size"),
    ({"remote.log.metadata.custom.metadata.max.bytes": "-1"},
     "remote.log.metadata.custom.metadata.max.bytes"),
])
def test_bad_settings_name_the_setting(props, named):
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        TieredConfig.from_props(props)


def test_compaction_with_tiering_refused_in_kafkas_words():
    with pytest.raises(InvalidConfigError,
                       match=r"^Remote log storage only supports topics with cleanup\.policy=delete "
                             r"\(remote\.storage\.enable=true, cleanup\.policy=compact\)$"):
        LogConfig.from_props({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    topic = LogConfig.from_props({"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfigError, match=r"remote\.storage\.enable.*remote\.log\.storage\.system\.enable"):
        check_topic_tiering("t", topic, TieredConfig.from_props())


def test_encryption_from_config(tmp_path, key_files):
    props = {"rsm.config.storage.url": str(tmp_path), "rsm.config.encryption.enabled": "true",
             "rsm.config.encryption.key.pair.id": "k2", "rsm.config.encryption.key.pairs": "k1,k2"}
    for key_id, (public, private) in key_files.items():
        props[f"rsm.config.encryption.key.pairs.{key_id}.public.key.file"] = str(public)
        props[f"rsm.config.encryption.key.pairs.{key_id}.private.key.file"] = str(private)
    rsm = FsspecRemoteStorageManager.from_config(TieredConfig.from_props(props))
    assert rsm.key_ring.active_id == "k2" and set(rsm.decrypt_ring.pairs) == {"k1", "k2"}
    rsm.close()
    props["rsm.config.encryption.key.pairs.k1.public.key.file"] = str(tmp_path / "missing.pem")
    with pytest.raises(InvalidConfigError, match="key pair k1.*missing.pem"):
        FsspecRemoteStorageManager.from_config(TieredConfig.from_props(props))


def test_conf_file_parses_with_its_defaults():
    props = load_properties(CONF)
    cfg = TieredConfig.from_props(props)
    for key, value in props.items():
        if key.startswith("rsm.config.") and not key.startswith("rsm.config.storage."):
            short = key[len("rsm.config."):]
            from logcore.tiered.config import TIERED_KEYS
            assert TIERED_KEYS[short].format(cfg.get(short)) == value, key


def test_manager_class_name_names_the_fsspec_rsm():
    from logcore.tiered.config import FSSPEC_RSM_CLASS
    cls = FsspecRemoteStorageManager
    assert f"{cls.__module__}.{cls.__qualname__}" == FSSPEC_RSM_CLASS
    assert TieredConfig.from_props({"remote.log.storage.manager.class.name": FSSPEC_RSM_CLASS}).enabled is False
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.storage\.manager\.class\.name"):
        TieredConfig.from_props({"remote.log.storage.manager.class.name": "org.example.Rsm"})
